# delta-sessions exec wrapper for POSIX sh (static text, never spliced): $1 = session folder,
# $2 = secret variable names. Persists cwd, variables, exports and set -o options.
__delta_dir=$1 __delta_secrets=$2
set --
. "$__delta_dir/state.sh"
__delta_save() {
  __delta_rc=$?
  __delta_flags=$-
  set +eux
  trap - EXIT
  __delta_ifs=$IFS
  IFS=' '
  for __delta_n in $__delta_secrets; do unset "$__delta_n"; done
  IFS=$__delta_ifs
  { set; export -p; } >> "$__delta_dir/state.next"
  {
    set +o
    case $__delta_flags in *e*) echo 'set -o errexit';; esac
    case $__delta_flags in *u*) echo 'set -o nounset';; esac
    case $__delta_flags in *x*) echo 'set -o xtrace';; esac
  } >> "$__delta_dir/options.next"
  pwd >> "$__delta_dir/cwd.next"
  exit "$__delta_rc"
}
trap __delta_save EXIT
. "$__delta_dir/options.sh"
. "$__delta_dir/command.sh"
__delta_save
