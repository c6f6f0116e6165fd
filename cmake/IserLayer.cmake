# iser_layer(NAME [INTERFACE] DIR dir SOURCES ... HEADERS ... DEPS ...)
#
# One library per layer of the initiator. The layering is enforced by what a layer can see: the
# library's public include directory is a tree of its own under the build directory holding only
# its HEADERS (symbolic links to the sources, at their usual "initiator/<layer>/x.h" paths). A
# consumer sees the headers of the libraries it links, directly or through their public DEPS, and
# nothing else, so an include that points up a layer (or sideways, to a layer not linked) does not
# compile. scripts/check-layers states the same rules for every file, tests and tools included.
function(iser_layer name)
  cmake_parse_arguments(L "INTERFACE" "DIR" "SOURCES;HEADERS;DEPS" ${ARGN})
  set(stage ${CMAKE_BINARY_DIR}/layers/${name})
  file(REMOVE_RECURSE ${stage})
  foreach(header ${L_HEADERS})
    set(source ${CMAKE_CURRENT_SOURCE_DIR}/${header})
    file(RELATIVE_PATH path ${PROJECT_SOURCE_DIR} ${source})
    get_filename_component(folder ${stage}/${path} DIRECTORY)
    file(MAKE_DIRECTORY ${folder})
    file(CREATE_LINK ${source} ${stage}/${path} SYMBOLIC)
  endforeach()
  if(L_INTERFACE)
    add_library(${name} INTERFACE)
    target_include_directories(${name} INTERFACE ${stage})
    target_link_libraries(${name} INTERFACE ${L_DEPS})
  else()
    add_library(${name} STATIC ${L_SOURCES})
    target_include_directories(${name} PUBLIC ${stage})
    target_link_libraries(${name} PUBLIC ${L_DEPS})
  endif()
endfunction()

# iser_source_folders(target FOLDER...)
#
# For code above the layers (the CLI, the frontends, tests): lets `target` include files of the
# named top-level folders ("cli", "tests", ...) by their usual paths, without making the source
# root, and so every layer, an include directory. Layers it uses come from what it links.
function(iser_source_folders target)
  set(stage ${CMAKE_BINARY_DIR}/folders/${target})
  file(REMOVE_RECURSE ${stage})
  file(MAKE_DIRECTORY ${stage})
  foreach(folder ${ARGN})
    file(CREATE_LINK ${PROJECT_SOURCE_DIR}/${folder} ${stage}/${folder} SYMBOLIC)
  endforeach()
  target_include_directories(${target} PRIVATE ${stage})
endfunction()
