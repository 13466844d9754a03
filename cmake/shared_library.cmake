# libattnjit.so: the C ABI (include/attnjit/attnjit.h) over the static attnjit libraries, for
# FFI users such as the Python binding (tools/python). Only the attnjit_* functions are
# exported. The C ABI's files (jit/c_api/*.cpp) are compiled once, into the object library
# attnjit_c_api, with hidden visibility but for the ATTNJIT_API functions; its objects are
# linked into this library itself, because --exclude-libs,ALL hides every symbol that comes
# from an archive, and into the static attnjit_jit for C++ users (those copies are never
# pulled here: their symbols are already defined).
file(GLOB ATTNJIT_C_API_SOURCES CONFIGURE_DEPENDS "${PROJECT_SOURCE_DIR}/jit/c_api/*.cpp")
add_library(attnjit_c_api OBJECT ${ATTNJIT_C_API_SOURCES})
set_target_properties(attnjit_c_api PROPERTIES
  CXX_VISIBILITY_PRESET hidden
  VISIBILITY_INLINES_HIDDEN ON)
target_compile_definitions(attnjit_c_api PRIVATE ATTNJIT_VERSION="${ATTNJIT_VERSION_STRING}")
# attnjit_jit's usage requirements without linking it (it holds these objects).
target_include_directories(attnjit_c_api PRIVATE
  $<TARGET_PROPERTY:attnjit_jit,INTERFACE_INCLUDE_DIRECTORIES>)
target_link_libraries(attnjit_c_api PRIVATE attnjit_runtime attnjit_compiler attnjit_dsl
                                            fmt::fmt-header-only nlohmann_json::nlohmann_json)
target_sources(attnjit_jit PRIVATE $<TARGET_OBJECTS:attnjit_c_api>)

add_library(attnjit_shared SHARED $<TARGET_OBJECTS:attnjit_c_api>)
set_target_properties(attnjit_shared PROPERTIES
  OUTPUT_NAME attnjit
  LINKER_LANGUAGE CXX
  LIBRARY_OUTPUT_DIRECTORY "${PROJECT_BINARY_DIR}")
target_link_libraries(attnjit_shared PRIVATE attnjit)
target_link_options(attnjit_shared PRIVATE "LINKER:--exclude-libs,ALL" "LINKER:--no-undefined"
                    "LINKER:--as-needed")
