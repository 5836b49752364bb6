# Sourced by the benches: the processor their figures were measured on, in
# one line (issue 41 asks for it beside each figure): lscpu's model name,
# family and model, and the avx512*/amx* flags that decide the kernels.
processor_line() {
  local flags
  flags=$(grep -m1 '^flags' /proc/cpuinfo | tr ' ' '\n' | grep -E '^(avx512|amx)' | tr '\n' ' ' || true)
  flags=${flags% }
  echo "$(lscpu | sed -n 's/^Model name: *//p'); family $(lscpu | sed -n 's/^CPU family: *//p')" \
    "model $(lscpu | sed -n 's/^Model: *//p'); ${flags:-no avx512*/amx* flags}"
}
