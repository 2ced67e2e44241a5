# Sourced by scripts/gpu-check and scripts/gpu-bench: sets $out, the folder for their logs.
# The lent GPU machine gives back at most 8 files of $OUT: there the logs are written to a
# folder of their own and packed into $OUT/<name>-logs.tar.gz when the script ends, however it
# ends. Elsewhere they stay plain files in ./gpu-check-logs.
#   gpu_logs NAME
gpu_logs() {
  if [ -n "${OUT:-}" ]; then
    out=$(mktemp -d "/tmp/$1-logs.XXXXXX")
    # shellcheck disable=SC2064  # the names are fixed now, on purpose
    trap "tar -czf '$OUT/$1-logs.tar.gz' -C '$out' ." EXIT
  else
    out=$root/gpu-check-logs
  fi
  mkdir -p "$out"
}
