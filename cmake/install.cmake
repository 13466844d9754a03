# `cmake --install <build> --prefix P` installs what a C++ or C project builds against:
#   include/attnjit/            the public headers: the C++ API (jit.hpp, spec.hpp, tensor.hpp,
#                               masks.hpp: the mask language, mask_builder.hpp, error.hpp) and
#                               the C ABI attnjit.h; the in-tree dsl/ and compiler/ headers
#                               behind them are not installed
#   lib/libattnjit.so           the C ABI (attnjit::shared); lib/libattnjit_*.a, the static
#                               libraries behind attnjit::attnjit (the C++ API)
#   bin/attnc                   the command-line driver
#   lib/cmake/attnjit/          attnjitConfig.cmake, its version file and the exported targets:
#                               find_package(attnjit) then link attnjit::attnjit
#   lib/pkgconfig/attnjit.pc    for the C ABI: pkg-config --cflags --libs attnjit
# The libraries link NVRTC by the toolkit path found at configure time (and carry it as an
# rpath); libcuda is loaded at run time, as in the build tree.
include(CMakePackageConfigHelpers)

set(ATTNJIT_CMAKE_DIR "${CMAKE_INSTALL_LIBDIR}/cmake/attnjit")
set_target_properties(attnjit_shared PROPERTIES EXPORT_NAME shared)
target_include_directories(attnjit_shared INTERFACE
  "$<BUILD_INTERFACE:${PROJECT_SOURCE_DIR}/include>" "$<INSTALL_INTERFACE:${CMAKE_INSTALL_INCLUDEDIR}>")

install(DIRECTORY "${PROJECT_SOURCE_DIR}/include/attnjit" DESTINATION "${CMAKE_INSTALL_INCLUDEDIR}")
install(TARGETS attnjit attnjit_jit attnjit_runtime attnjit_dsl attnjit_compiler
                attnjit_templates attnjit_shared
        EXPORT attnjitTargets
        ARCHIVE DESTINATION "${CMAKE_INSTALL_LIBDIR}"
        LIBRARY DESTINATION "${CMAKE_INSTALL_LIBDIR}"
        RUNTIME DESTINATION "${CMAKE_INSTALL_BINDIR}")
if(TARGET attnc)
  install(TARGETS attnc RUNTIME DESTINATION "${CMAKE_INSTALL_BINDIR}")
endif()
install(EXPORT attnjitTargets NAMESPACE attnjit:: DESTINATION "${ATTNJIT_CMAKE_DIR}")

configure_package_config_file("${CMAKE_CURRENT_LIST_DIR}/attnjitConfig.cmake.in"
                              "${PROJECT_BINARY_DIR}/attnjitConfig.cmake"
                              INSTALL_DESTINATION "${ATTNJIT_CMAKE_DIR}")
# 0.x: a minor version may change the API, so only the same minor version is compatible.
write_basic_package_version_file("${PROJECT_BINARY_DIR}/attnjitConfigVersion.cmake"
                                 VERSION "${PROJECT_VERSION}" COMPATIBILITY SameMinorVersion)
install(FILES "${PROJECT_BINARY_DIR}/attnjitConfig.cmake"
              "${PROJECT_BINARY_DIR}/attnjitConfigVersion.cmake"
        DESTINATION "${ATTNJIT_CMAKE_DIR}")

# The .pc file finds the prefix from its own place, so `--prefix P` at install time holds.
set(ATTNJIT_PC_DIR "${CMAKE_INSTALL_LIBDIR}/pkgconfig")
file(RELATIVE_PATH ATTNJIT_PC_TO_PREFIX "/prefix/${ATTNJIT_PC_DIR}" "/prefix")
string(REGEX REPLACE "/$" "" ATTNJIT_PC_TO_PREFIX "${ATTNJIT_PC_TO_PREFIX}")
configure_file("${CMAKE_CURRENT_LIST_DIR}/attnjit.pc.in" "${PROJECT_BINARY_DIR}/attnjit.pc" @ONLY)
install(FILES "${PROJECT_BINARY_DIR}/attnjit.pc" DESTINATION "${ATTNJIT_PC_DIR}")
