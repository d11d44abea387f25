# The API reference: `cmake --build <dir> --target docs` runs doxygen over the public headers
# (EMBER_PUBLIC_HEADERS, from cmake/EmberLibrary.cmake) and writes HTML to
# <dir>/docs/api/html/index.html. Not part of ALL. Any doxygen warning (an undocumented public
# declaration, a malformed comment) fails the target (docs/Doxyfile.in: WARN_AS_ERROR).
# Without doxygen the target still exists and fails, saying what to install.
find_package(Doxygen QUIET)

if(DOXYGEN_FOUND)
  set(EMBER_DOCS_OUTPUT_DIR ${PROJECT_BINARY_DIR}/docs/api)
  set(EMBER_DOCS_MAINPAGE ${PROJECT_SOURCE_DIR}/docs/api-mainpage.md)
  set(_ember_docs_files ${EMBER_DOCS_MAINPAGE})
  foreach(h ${EMBER_PUBLIC_HEADERS})
    list(APPEND _ember_docs_files ${PROJECT_SOURCE_DIR}/${h})
  endforeach()
  # Doxyfile lists: space-separated, each path quoted (a source tree may have spaces in its path).
  set(_ember_docs_quoted ${_ember_docs_files})
  list(TRANSFORM _ember_docs_quoted PREPEND "\"")
  list(TRANSFORM _ember_docs_quoted APPEND "\"")
  list(JOIN _ember_docs_quoted " \\\n                         " EMBER_DOCS_INPUT)
  configure_file(${PROJECT_SOURCE_DIR}/docs/Doxyfile.in ${PROJECT_BINARY_DIR}/docs/Doxyfile @ONLY)
  add_custom_target(docs
    COMMAND ${CMAKE_COMMAND} -E make_directory ${EMBER_DOCS_OUTPUT_DIR}
    COMMAND Doxygen::doxygen ${PROJECT_BINARY_DIR}/docs/Doxyfile
    COMMAND ${CMAKE_COMMAND} -E echo "API reference: ${EMBER_DOCS_OUTPUT_DIR}/html/index.html"
    WORKING_DIRECTORY ${PROJECT_SOURCE_DIR}
    DEPENDS ${PROJECT_BINARY_DIR}/docs/Doxyfile ${_ember_docs_files}
    COMMENT "Doxygen: the API reference from the public headers"
    VERBATIM)
else()
  add_custom_target(docs
    COMMAND ${CMAKE_COMMAND} -E echo "doxygen not found: apt-get install doxygen"
    COMMAND ${CMAKE_COMMAND} -E false
    COMMENT "Doxygen: not installed"
    VERBATIM)
endif()
