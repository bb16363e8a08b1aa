# delta-sessions exec wrapper for POSIX sh (static text, never spliced): $1 = session folder,
# $2 = secret variable names. Persists cwd, variables, exports and set -o options.
. "$1/env.sh"
__delta_dir=$1 __delta_secrets=$2
set --
__delta_save() {
  __delta_rc=$?
  __delta_flags=$-
  set +eux
  trap - EXIT
  {
    set +o
    case $__delta_flags in *e*) echo 'set -o errexit';; esac
    case $__delta_flags in *u*) echo 'set -o nounset';; esac
    case $__delta_flags in *x*) echo 'set -o xtrace';; esac
  } >> "$__delta_dir/options.next"
  __delta_ifs=$IFS
  IFS=' '
  for __delta_n in $__delta_secrets; do unset "$__delta_n"; done
  IFS=$__delta_ifs
  unset __delta_flags __delta_ifs __delta_n
  { set; export -p; } >> "$__delta_dir/env.next"
  pwd >> "$__delta_dir/work_dir.next"
  exit "$__delta_rc"
}
trap __delta_save EXIT
. "$__delta_dir/options.sh"
. "$__delta_dir/command.sh"
__delta_save
