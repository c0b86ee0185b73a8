# NCCL with the device API (nccl_device.h), version 2.28 or later: the transport's symmetric windows and peer
# pointers. Defines the imported target mok::nccl.
#
# MOK_NCCL_ROOT names the installation: by default the CUDA toolkit's own (include/ and lib/ or lib64/ below
# it); PyTorch's pip package works too (site-packages/nvidia/nccl), which ships only libnccl.so.2, hence the
# versioned name in the search. The library found at build time must have the same device API as the one
# loaded at run time (2.28.x: the ncclWindow layout the inline device functions read).
if(TARGET mok::nccl)
  return()
endif()

set(mok_nccl_min_version 2.28)
get_filename_component(mok_cuda_toolkit_root "${CUDAToolkit_BIN_DIR}" DIRECTORY)
set(MOK_NCCL_ROOT "${mok_cuda_toolkit_root}" CACHE PATH "NCCL installation (include/nccl_device.h, lib/libnccl.so*)")

find_path(MOK_NCCL_INCLUDE_DIR nccl_device.h
  HINTS "${MOK_NCCL_ROOT}"
  PATH_SUFFIXES include targets/x86_64-linux/include targets/sbsa-linux/include
  NO_DEFAULT_PATH)
find_library(MOK_NCCL_LIBRARY NAMES nccl libnccl.so.2
  HINTS "${MOK_NCCL_ROOT}"
  PATH_SUFFIXES lib lib64 targets/x86_64-linux/lib targets/sbsa-linux/lib
  NO_DEFAULT_PATH)
if(NOT MOK_NCCL_INCLUDE_DIR OR NOT MOK_NCCL_LIBRARY)
  message(FATAL_ERROR "NCCL with the device API (nccl_device.h, libnccl.so or libnccl.so.2) not found under "
                      "MOK_NCCL_ROOT='${MOK_NCCL_ROOT}'. Point MOK_NCCL_ROOT at an NCCL ${mok_nccl_min_version}+ "
                      "installation, e.g. the nvidia/nccl folder of PyTorch's pip package.")
endif()

file(STRINGS "${MOK_NCCL_INCLUDE_DIR}/nccl.h" mok_nccl_version_lines REGEX "^#define NCCL_(MAJOR|MINOR|PATCH) ")
foreach(line IN LISTS mok_nccl_version_lines)
  if(line MATCHES "^#define NCCL_(MAJOR|MINOR|PATCH) +([0-9]+)")
    set(mok_nccl_${CMAKE_MATCH_1} "${CMAKE_MATCH_2}")
  endif()
endforeach()
set(MOK_NCCL_VERSION "${mok_nccl_MAJOR}.${mok_nccl_MINOR}.${mok_nccl_PATCH}")
if(MOK_NCCL_VERSION VERSION_LESS mok_nccl_min_version)
  message(FATAL_ERROR "NCCL ${MOK_NCCL_VERSION} at ${MOK_NCCL_INCLUDE_DIR}: mok needs ${mok_nccl_min_version} or "
                      "later (the device API)")
endif()
message(STATUS "NCCL ${MOK_NCCL_VERSION}: ${MOK_NCCL_LIBRARY}")

add_library(mok::nccl SHARED IMPORTED GLOBAL)
set_target_properties(mok::nccl PROPERTIES
  IMPORTED_LOCATION "${MOK_NCCL_LIBRARY}"
  INTERFACE_INCLUDE_DIRECTORIES "${MOK_NCCL_INCLUDE_DIR}")
