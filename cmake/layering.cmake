# The layering of docs/architecture.md ("Folders and targets") as a build
# rule: every project include ("common/...", "server/...", ...) of every
# .h and .cc under common/, storage/, client/ and server/ must name a folder
# (or file) its own layer may use. Includes are rooted at the repository for
# every target, so the compiler alone cannot refuse, say, the shared runtime
# including storage/store.h; this does, at every build (target
# fca_layering) and as ctest layering_test.
#
#   cmake -DROOT=<repository> [-DSTAMP=<file>] [-DINJECT=<file>:<include>] -P layering.cmake
#
# STAMP is written when every include is allowed. INJECT adds an include to
# a file, as if it were written there (layering_violation_test: a violation
# must be refused).

# Each layer: a path prefix, then the prefixes its files may include. A file
# belongs to the layer of the longest prefix that starts its path; a file of
# no layer is refused, so a new folder gets its row here.
set(fca_engine_all "server/engine/io/ server/engine/text/ server/engine/models/ server/engine/audit/")
set(fca_layers
  "common/|common/"
  "storage/|common/ storage/"
  "client/|common/ proto/ client/"
  "server/engine/io/|common/ server/engine/io/"
  "server/engine/text/|common/ server/engine/text/"
  "server/engine/models/|common/ server/engine/io/ server/engine/text/ server/engine/models/"
  "server/engine/audit/|common/ ${fca_engine_all}"
  "server/tools/|common/ ${fca_engine_all} server/tools/"
  # The shared runtime (what runs a task): no store, no coordinator, no gRPC.
  "server/runtime/|common/ proto/ ${fca_engine_all} server/runtime/"
  # fca-worker: the runtime and the worker protocol's gRPC client.
  "server/worker/|common/ proto/ ${fca_engine_all} server/runtime/ server/grpc/remote_broker.h"
  "server/jobs/|common/ proto/ storage/ ${fca_engine_all} server/runtime/ server/jobs/"
  "server/core/|common/ proto/ storage/ ${fca_engine_all} server/runtime/ server/jobs/ server/core/"
  # Authentication, the same for gRPC and HTTP: the store's keys and the
  # caller type, nothing of either transport.
  "server/auth/|common/ proto/ storage/ server/auth/ server/core/caller.h"
  "server/grpc/|common/ proto/ storage/ ${fca_engine_all} server/runtime/ server/jobs/ server/core/ server/auth/ server/grpc/"
  # RemoteBroker: what fca-worker links of gRPC.
  "server/grpc/remote_broker|common/ proto/ ${fca_engine_all} server/runtime/ server/grpc/remote_broker.h"
  "server/http/|common/ proto/ storage/ ${fca_engine_all} server/runtime/ server/jobs/ server/core/ server/auth/ server/http/"
  # fca-server: everything.
  "server/main.cc|common/ proto/ storage/ server/"
  "server/server|common/ proto/ storage/ server/"
)
# Includes of these first folders are the project's; others (absl, gtest,
# system headers) are not checked.
set(fca_project_roots common client proto server storage tests)

cmake_minimum_required(VERSION 3.20)

if(NOT ROOT)
  message(FATAL_ERROR "layering.cmake: -DROOT=<repository> is required")
endif()

# Sets `out` to the allowed prefixes of `file`'s layer, or to "" (none).
function(fca_layer_of file out)
  set(best "")
  set(allowed "")
  foreach(row IN LISTS fca_layers)
    string(REPLACE "|" ";" parts "${row}")
    list(GET parts 0 prefix)
    list(GET parts 1 uses)
    string(LENGTH "${prefix}" n)
    string(LENGTH "${best}" best_n)
    string(FIND "${file}" "${prefix}" at)
    if(at EQUAL 0 AND n GREATER best_n)
      set(best "${prefix}")
      string(REPLACE " " ";" allowed "${uses}")
    endif()
  endforeach()
  set(${out} "${allowed}" PARENT_SCOPE)
endfunction()

file(GLOB_RECURSE files RELATIVE "${ROOT}"
  "${ROOT}/common/*.h" "${ROOT}/common/*.cc"
  "${ROOT}/storage/*.h" "${ROOT}/storage/*.cc"
  "${ROOT}/client/*.h" "${ROOT}/client/*.cc"
  "${ROOT}/server/*.h" "${ROOT}/server/*.cc")

set(inject_file "")
if(INJECT)
  string(REPLACE ":" ";" inject "${INJECT}")
  list(GET inject 0 inject_file)
  list(GET inject 1 inject_include)
endif()

set(violations "")
foreach(file IN LISTS files)
  fca_layer_of("${file}" allowed)
  if(NOT allowed)
    string(APPEND violations "  ${file}: belongs to no layer (add its folder to cmake/layering.cmake)\n")
    continue()
  endif()
  file(STRINGS "${ROOT}/${file}" lines REGEX "^[ \t]*#[ \t]*include[ \t]*\"")
  set(includes "")
  foreach(line IN LISTS lines)
    string(REGEX REPLACE "^[ \t]*#[ \t]*include[ \t]*\"([^\"]*)\".*" "\\1" include "${line}")
    list(APPEND includes "${include}")
  endforeach()
  if(file STREQUAL inject_file)
    list(APPEND includes "${inject_include}")
  endif()
  foreach(include IN LISTS includes)
    string(REGEX REPLACE "/.*" "" first "${include}")
    if(NOT first IN_LIST fca_project_roots)
      continue()
    endif()
    set(ok FALSE)
    foreach(prefix IN LISTS allowed)
      string(FIND "${include}" "${prefix}" at)
      if(at EQUAL 0)
        set(ok TRUE)
        break()
      endif()
    endforeach()
    if(NOT ok)
      string(REPLACE ";" " " uses "${allowed}")
      string(APPEND violations "  ${file} includes ${include}; its layer may include only: ${uses}\n")
    endif()
  endforeach()
endforeach()

if(violations)
  message(FATAL_ERROR "layering (cmake/layering.cmake, docs/architecture.md "
    "\"Folders and targets\"):\n${violations}")
endif()
if(STAMP)
  file(TOUCH "${STAMP}")
endif()
