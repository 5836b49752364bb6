# Installation and the Debian packages (deploy/README.md).
#
#   cmake --install build --prefix DIR     the binaries and the .proto files
#   cpack -G DEB --config build/CPackConfig.cmake  (or: ninja -C build package)
#       fca-server_<version>_<arch>.deb: fca-server, fca-worker, fca-local-audit,
#           fca-train, the systemd unit, sysusers.d and tmpfiles.d entries,
#           /etc/fca/fca-server.flags (a conffile)
#       fca-client_<version>_<arch>.deb: the fca CLI and the .proto files
#       python3-fca_<version>_all.deb: the Python package fca (python/,
#           docs/python.md) with its generated fca.v1 stubs
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

# The Python package as python/CMakeLists.txt assembles it in the build
# tree. EXCLUDE_FROM_ALL: a plain `cmake --install` leaves it out; the
# python3-fca package installs it where Debian's python3 finds it.
install(DIRECTORY ${FCA_PYTHON_PACKAGE}
  DESTINATION lib/python3/dist-packages COMPONENT python3-fca EXCLUDE_FROM_ALL
  PATTERN __pycache__ EXCLUDE)

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
set(CPACK_COMPONENTS_ALL fca-server fca-client python3-fca)

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

# Pure Python: one package for every architecture, its Depends named here
# (dpkg-shlibdeps has no binaries to read). numpy: export(); pandas and
# tqdm (DataFrames, progress bars) are optional, matplotlib (report.plot())
# more so.
set(CPACK_DEBIAN_PYTHON3-FCA_PACKAGE_NAME python3-fca)
set(CPACK_DEBIAN_PYTHON3-FCA_PACKAGE_ARCHITECTURE all)
set(CPACK_DEBIAN_PYTHON3-FCA_PACKAGE_SECTION python)
set(CPACK_DEBIAN_PYTHON3-FCA_PACKAGE_DEPENDS
  "python3 (>= 3.9), python3-grpcio, python3-protobuf (>= 3.20), python3-numpy")
set(CPACK_DEBIAN_PYTHON3-FCA_PACKAGE_RECOMMENDS "python3-pandas, python3-tqdm")
set(CPACK_DEBIAN_PYTHON3-FCA_PACKAGE_SUGGESTS "fca-client, python3-ipykernel, python3-matplotlib")
set(CPACK_DEBIAN_PYTHON3-FCA_DESCRIPTION
  "Python client of the fca audit service\n\
The fca module: fca.Client() for an fca-server (models, datasets, audits,\n\
results and reports as pandas DataFrames, progress bars, exported\n\
coefficients as numpy arrays), with the fca.v1 gRPC stubs.")

include(CPack)
