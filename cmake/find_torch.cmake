# libtorch, from either line fca builds with (docs/developing.md, "Both
# libtorch lines"): Debian 12's libtorch-dev 1.13 (CPU), found in /usr, and
# a PyTorch 2.x wheel's (CUDA), found through CMAKE_PREFIX_PATH
# (python3 -c 'import torch; print(torch.utils.cmake_prefix_path)';
# scripts/device/check.sh). What differs between the two in C++ lives in
# server/engine/models/torch_util.{h,cc}; what differs in CMake, here.

# A CUDA wheel's Caffe2 config links torch::nvtoolsext to CUDA::nvToolsExt,
# which CUDA 12.9 and later no longer ship (their NVTX is the header-only
# CUDA::nvtx3); where the toolkit lacks it, nvtx3 stands in.
find_package(CUDAToolkit QUIET)
if(TARGET CUDA::nvtx3 AND NOT TARGET CUDA::nvToolsExt)
  add_library(CUDA::nvToolsExt INTERFACE IMPORTED)
  target_link_libraries(CUDA::nvToolsExt INTERFACE CUDA::nvtx3)
endif()

find_package(Torch CONFIG REQUIRED)
# Torch_VERSION is the package's version (1.13.1, 2.11.0); the wheel's
# TorchConfigVersion sets it like Debian's.
message(STATUS "libtorch ${Torch_VERSION} (${Torch_DIR})")
# libtorch 2.12 and later are built as C++20 and refuse an older standard
# in their headers; 1.13 to 2.11 need C++17.
if(Torch_VERSION VERSION_GREATER_EQUAL 2.12)
  set(CMAKE_CXX_STANDARD 20)
endif()
