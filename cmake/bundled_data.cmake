# The bundled model weights and the largest fixtures are committed
# xz-compressed (FILE.xz): the tree travels whole to the GPU machines that
# run scripts/device/check.sh, 64 MiB at most with the dependency pack
# (docs/developing.md, "Tree size"; scripts/device/size_check.sh). The
# build expands each next to itself, as the FILE its readers open (git
# ignores it: .gitignore), before anything else is built: every target
# links fca_common, which depends on fca_bundled_data.
#
# Expanded: models/*/*.xz, examples/models/*/*.xz, tests/data/**/*.xz.
file(GLOB fca_xz_files CONFIGURE_DEPENDS
  ${PROJECT_SOURCE_DIR}/models/*/*.xz
  ${PROJECT_SOURCE_DIR}/examples/models/*/*.xz)
file(GLOB_RECURSE fca_xz_test_files CONFIGURE_DEPENDS ${PROJECT_SOURCE_DIR}/tests/data/*.xz)
list(APPEND fca_xz_files ${fca_xz_test_files})

# xz (xz-utils) where it is installed, else Python's lzma module: a GPU
# machine's image may lack the one or the other.
find_program(FCA_XZ xz)
if(NOT FCA_XZ)
  find_package(Python3 COMPONENTS Interpreter)
  if(NOT Python3_Interpreter_FOUND)
    message(FATAL_ERROR "expanding the bundled *.xz files needs xz (xz-utils) or python3")
  endif()
endif()

set(fca_expanded_files)
foreach(src IN LISTS fca_xz_files)
  string(REGEX REPLACE "\\.xz$" "" dst "${src}")
  add_custom_command(OUTPUT "${dst}"
    COMMAND ${CMAKE_COMMAND} -DSRC=${src} -DDST=${dst} -DXZ=${FCA_XZ}
      -DPYTHON=${Python3_EXECUTABLE} -P ${PROJECT_SOURCE_DIR}/cmake/expand_xz.cmake
    DEPENDS "${src}" ${PROJECT_SOURCE_DIR}/cmake/expand_xz.cmake
    COMMENT "Expanding ${src}"
    VERBATIM)
  list(APPEND fca_expanded_files "${dst}")
endforeach()
add_custom_target(fca_bundled_data ALL DEPENDS ${fca_expanded_files})
