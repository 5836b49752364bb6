# Installation and the Debian packages (deploy/README.md).
#
#   cmake --install build --prefix DIR     the binaries and the .proto files
#   cpack -G DEB --config build/CPackConfig.cmake  (or: ninja -C build package)
#       fca-server_<version>_<arch>.deb: fca-server, fca-worker, fca-local-audit,
#           fca-train, the systemd unit, sysusers.d and tmpfiles.d entries,
#           /etc/fca/fca-server.flags (a conffile)
#       fca-client_<version>_<arch>.deb: the fca CLI and the .proto files
#
# Tests and benchmarks are never installed.
include(GNUInstallDirs)

install(TARGETS fca-server fca-worker fca-local-audit fca-train
  RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR} COMPONENT fca-server)
install(TARGETS fca
  RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR} COMPONENT fca-client)
# Kept under proto/fca/v1/: worker_service.proto imports
# "proto/fca/v1/audit_service.proto", so `protoc -I <datadir>/fca` compiles both.
install(DIRECTORY proto/fca/v1/
  DESTINATION ${CMAKE_INSTALL_DATADIR}/fca/proto/fca/v1
  COMPONENT fca-client
  FILES_MATCHING PATTERN "*.proto")

# The system integration of the server package. EXCLUDE_FROM_ALL: a plain
# `cmake --install` (the Dockerfile's) leaves them out; the package, or
# `cmake --install --component fca-server --prefix /usr`, has them. They
# name /usr/bin and /etc/fca, so they fit only that prefix, which the
# package uses.
set(FCA_DEBIAN_DIR ${PROJECT_SOURCE_DIR}/deploy/debian)
install(FILES ${FCA_DEBIAN_DIR}/fca-server.service
  DESTINATION lib/systemd/system COMPONENT fca-server EXCLUDE_FROM_ALL)
install(FILES ${FCA_DEBIAN_DIR}/fca-server.sysusers
  DESTINATION lib/sysusers.d RENAME fca-server.conf COMPONENT fca-server EXCLUDE_FROM_ALL)
install(FILES ${FCA_DEBIAN_DIR}/fca-server.tmpfiles
  DESTINATION lib/tmpfiles.d RENAME fca-server.conf COMPONENT fca-server EXCLUDE_FROM_ALL)
# Absolute: /etc, not <prefix>/etc (GNUInstallDirs maps only the configure-
# time prefix /usr to /etc).
install(FILES ${FCA_DEBIAN_DIR}/fca-server.flags
  DESTINATION /etc/fca COMPONENT fca-server EXCLUDE_FROM_ALL)

set(FCA_PACKAGE_MAINTAINER "fca maintainers <fca@localhost>" CACHE STRING
  "Maintainer field of the Debian packages")

set(CPACK_PACKAGE_NAME fca)
set(CPACK_PACKAGE_VERSION ${PROJECT_VERSION})
set(CPACK_PACKAGE_VENDOR "fca")
set(CPACK_PACKAGE_CONTACT "${FCA_PACKAGE_MAINTAINER}")
set(CPACK_PACKAGING_INSTALL_PREFIX /usr)
set(CPACK_STRIP_FILES ON)
set(CPACK_INSTALL_DEFAULT_DIRECTORY_PERMISSIONS
  OWNER_READ OWNER_WRITE OWNER_EXECUTE GROUP_READ GROUP_EXECUTE WORLD_READ WORLD_EXECUTE)
set(CPACK_COMPONENTS_ALL fca-server fca-client)

set(CPACK_GENERATOR DEB)
set(CPACK_DEB_COMPONENT_INSTALL ON)
set(CPACK_DEBIAN_FILE_NAME DEB-DEFAULT)
set(CPACK_DEBIAN_PACKAGE_MAINTAINER "${FCA_PACKAGE_MAINTAINER}")
set(CPACK_DEBIAN_PACKAGE_SECTION science)
# Each package's description: its first line is the summary. (No
# CPACK_PACKAGE_DESCRIPTION_SUMMARY: CPack would put it above both.)
# Depends from dpkg-shlibdeps, per package: the client's from the CLI alone,
# so it does not pull in libtorch or SQLite.
set(CPACK_DEBIAN_PACKAGE_SHLIBDEPS ON)
set(CPACK_DEBIAN_PACKAGE_CONTROL_STRICT_PERMISSION ON)

set(CPACK_DEBIAN_FCA-SERVER_PACKAGE_NAME fca-server)
set(CPACK_DEBIAN_FCA-SERVER_DESCRIPTION
  "fca audit server, remote worker and tools\n\
fca-server (gRPC and HTTP audit service, systemd unit fca-server.service),\n\
fca-worker (runs audit tasks for a remote fca-server), fca-local-audit and\n\
fca-train. Settings: /etc/fca/fca-server.flags; state: /var/lib/fca.")
# libopenblas0-openmp: the pthread OpenBLAS ignores torch::set_num_threads
# (see the Dockerfile).
set(CPACK_DEBIAN_FCA-SERVER_PACKAGE_RECOMMENDS "fca-client, libopenblas0-openmp, systemd")
set(CPACK_DEBIAN_FCA-SERVER_PACKAGE_CONTROL_EXTRA
  ${FCA_DEBIAN_DIR}/conffiles
  ${FCA_DEBIAN_DIR}/postinst
  ${FCA_DEBIAN_DIR}/prerm
  ${FCA_DEBIAN_DIR}/postrm)

set(CPACK_DEBIAN_FCA-CLIENT_PACKAGE_NAME fca-client)
set(CPACK_DEBIAN_FCA-CLIENT_DESCRIPTION
  "fca command-line client and API definitions\n\
fca, the client of an fca-server (audits, datasets, reports), and the\n\
gRPC .proto files of the fca.v1 API under /usr/share/fca/proto.")

include(CPack)
