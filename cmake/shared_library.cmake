# libattnjit.so: the C ABI (include/attnjit/attnjit.h) over the static attnjit libraries, for
# FFI users such as the Python binding (tools/python). Only the attnjit_* functions are
# exported. The C ABI's files (jit/c_api/*.cpp) are compiled into this target itself (they
# are also members of the static attnjit_jit for C++ users, but the linker never pulls
# those copies: their symbols are already defined here), because --exclude-libs,ALL hides every
# symbol that comes from an archive.
file(GLOB ATTNJIT_C_API_SOURCES CONFIGURE_DEPENDS "${PROJECT_SOURCE_DIR}/jit/c_api/*.cpp")
add_library(attnjit_shared SHARED ${ATTNJIT_C_API_SOURCES})
set_target_properties(attnjit_shared PROPERTIES
  OUTPUT_NAME attnjit
  CXX_VISIBILITY_PRESET hidden
  VISIBILITY_INLINES_HIDDEN ON
  LIBRARY_OUTPUT_DIRECTORY "${PROJECT_BINARY_DIR}")
target_compile_definitions(attnjit_shared PRIVATE ATTNJIT_VERSION="${ATTNJIT_VERSION_STRING}")
target_link_libraries(attnjit_shared PRIVATE attnjit fmt::fmt-header-only
                                             nlohmann_json::nlohmann_json)
target_link_options(attnjit_shared PRIVATE "LINKER:--exclude-libs,ALL" "LINKER:--no-undefined"
                    "LINKER:--as-needed")
