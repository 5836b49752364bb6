# Batches for the libraries (FCA_UNITY_LIBS, default ON): CMake's
# unity build compiles a target's sources 8 at a time as one unit, so that
# each batch parses gRPC's, protobuf's and Abseil's headers (or loads the
# precompiled torch header) and instantiates their templates once. The
# demo's three binaries built from nothing on 2 cores in 236 s instead of
# 398 s (docs/developing.md, "Measuring CI and the first report").
#
#   fca_unity(TARGET [SEPARATE SOURCE ...])
#
# SEPARATE: sources that keep a unit of their own, because a name in their
# anonymous namespace is also defined by another source of the target, or
# because a class of theirs with external linkage holds a type of their
# anonymous namespace (GCC's -Wsubobject-linkage warns of that in a file
# included by the batch, and CI builds with -Werror). A source with its own
# compile options (moe_host.cc) keeps its unit anyway.
# scripts/tidy.sh and scripts/thread_safety.sh check a batch as one unit,
# their findings in each source included (scripts/compile_units.sh maps a
# source to its batch).
function(fca_unity target)
  if(NOT FCA_UNITY_LIBS)
    return()
  endif()
  cmake_parse_arguments(ARG "" "" "SEPARATE" ${ARGN})
  set_target_properties(${target} PROPERTIES UNITY_BUILD ON UNITY_BUILD_BATCH_SIZE 8)
  if(ARG_SEPARATE)
    set_source_files_properties(${ARG_SEPARATE} TARGET_DIRECTORY ${target}
      PROPERTIES SKIP_UNITY_BUILD_INCLUSION ON)
  endif()
endfunction()
