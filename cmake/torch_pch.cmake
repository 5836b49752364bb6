# Precompiled torch headers (FCA_PCH, default ON).
#
# Parsing <ATen/ATen.h> alone costs ~8 s of CPU and ~0.5 GB in every
# translation unit that includes it (<torch/torch.h>: ~18 s and ~1 GB).
# fca_engine_models precompiles <ATen/ATen.h> once; the other targets with
# torch units reuse that header (REUSE_FROM: the same compiler and flags;
# their extra -D's are macros ATen does not test, so GCC accepts it).
#
#   fca_torch_pch(TARGET)                    TARGET precompiles the header
#   fca_torch_pch(TARGET REUSE_FROM OWNER)   TARGET uses OWNER's
#
# Only the sources of TARGET that include a torch header themselves
# (#include <ATen/...>, <c10/...> or <torch/...>, read when CMake runs) get
# it; the torch-free ones compile as before, so they neither pay for loading
# it nor come to depend on torch unnoticed. A source whose first torch
# include is added later compiles correctly either way, and gets the header
# at the next configure.
#
# CMake passes -Winvalid-pch: GCC warns when it cannot use the header (it
# would otherwise parse the headers silently). ccache caches these units
# only with the sloppiness set in the top-level CMakeLists.txt's launcher.
function(fca_torch_pch target)
  if(NOT FCA_PCH)
    return()
  endif()
  cmake_parse_arguments(ARG "" "REUSE_FROM" "" ${ARGN})
  get_target_property(sources ${target} SOURCES)
  get_target_property(source_dir ${target} SOURCE_DIR)
  set(n_torch 0)
  foreach(src IN LISTS sources)
    if(NOT src MATCHES "\\.cc$")
      continue()
    endif()
    if(IS_ABSOLUTE "${src}")
      set(path "${src}")
    else()
      set(path "${source_dir}/${src}")
    endif()
    file(STRINGS "${path}" torch_includes REGEX "^#include <(ATen|c10|torch)/")
    if(torch_includes)
      math(EXPR n_torch "${n_torch} + 1")
    else()
      set_source_files_properties("${src}" TARGET_DIRECTORY ${target}
        PROPERTIES SKIP_PRECOMPILE_HEADERS ON)
    endif()
  endforeach()
  if(n_torch EQUAL 0)
    return()
  endif()
  if(ARG_REUSE_FROM)
    target_precompile_headers(${target} REUSE_FROM ${ARG_REUSE_FROM})
  else()
    target_precompile_headers(${target} PRIVATE <ATen/ATen.h>)
  endif()
endfunction()
