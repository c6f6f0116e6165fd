# iser_man_page(NAME POD CENTER): section-1 man page NAME.1 from the POD file with pod2man, built
# with everything and installed into man1. Without pod2man (perl) there is no page, as a build
# without docs: the program still builds.
find_program(POD2MAN pod2man)

function(iser_man_page name pod center)
  if(NOT POD2MAN)
    return()
  endif()
  set(page ${CMAKE_CURRENT_BINARY_DIR}/${name}.1)
  add_custom_command(
    OUTPUT ${page}
    COMMAND ${POD2MAN} --section=1 --center=${center} --release=iser-connect-${PROJECT_VERSION}
            --name=${name} ${pod} ${page}
    DEPENDS ${pod}
    COMMENT "Generating ${name}.1")
  add_custom_target(${name}-man ALL DEPENDS ${page})
  install(FILES ${page} DESTINATION ${CMAKE_INSTALL_MANDIR}/man1)
endfunction()
