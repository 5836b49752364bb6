# cmake -DSRC=FILE.xz -DDST=FILE [-DXZ=xz] [-DPYTHON=python3] -P expand_xz.cmake
# Writes DST whole or not at all (a temporary file renamed over it), so an
# interrupted build never leaves half a weights file behind.
set(tmp "${DST}.expanding")
if(XZ)
  execute_process(COMMAND "${XZ}" -dc "${SRC}" OUTPUT_FILE "${tmp}" RESULT_VARIABLE rc)
else()
  execute_process(COMMAND "${PYTHON}" -c
    "import lzma, shutil, sys; shutil.copyfileobj(lzma.open(sys.argv[1]), open(sys.argv[2], 'wb'))"
    "${SRC}" "${tmp}" RESULT_VARIABLE rc)
endif()
if(NOT rc EQUAL 0)
  file(REMOVE "${tmp}")
  message(FATAL_ERROR "cannot expand ${SRC}: ${rc}")
endif()
file(RENAME "${tmp}" "${DST}")
