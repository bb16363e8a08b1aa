# delta-sessions exec wrapper for bash (static text, never spliced): $1 = session folder,
# $2 = space-separated secret variable names never saved. Restores env.sh, options.sh,
# runs command.sh, then writes env.next, options.next and work_dir.next for Rust to commit.
# Every file it writes is created empty (0600) by Rust beforehand and only appended to:
# truncating a file costs milliseconds on ext4 (auto_da_alloc flushes it on close).
__delta_dir=$1 __delta_secrets=" $2 "
builtin set --
builtin source -- "$__delta_dir/env.sh"
__delta_save() {
  __delta_rc=$?
  __delta_flags=$-
  builtin set +euvx
  builtin trap - EXIT
  {
    builtin set +o
    [[ $__delta_flags != *e* ]] || builtin echo 'set -o errexit'
    [[ $__delta_flags != *u* ]] || builtin echo 'set -o nounset'
    [[ $__delta_flags != *v* ]] || builtin echo 'set -o verbose'
    [[ $__delta_flags != *x* ]] || builtin echo 'set -o xtrace'
    builtin shopt -p
  } >> "$__delta_dir/options.next"
  # Options are saved; now make the matching below independent of them.
  builtin shopt -u nocasematch extglob
  builtin compgen -v >> "$__delta_dir/names.vars"
  builtin mapfile -t __delta_names < "$__delta_dir/names.vars"
  __delta_keep=()
  for __delta_n in "${__delta_names[@]}"; do
    case $__delta_n in
      __delta_*|BASH|BASHOPTS|BASHPID|BASH_ALIASES|BASH_ARGC|BASH_ARGV|BASH_ARGV0|BASH_CMDS|BASH_COMMAND|BASH_EXECUTION_STRING|BASH_LINENO|BASH_LOADABLES_PATH|BASH_MONOSECONDS|BASH_REMATCH|BASH_SOURCE|BASH_SUBSHELL|BASH_TRAPSIG|BASH_VERSINFO|BASH_VERSION|COLUMNS|COMP_WORDBREAKS|DIRSTACK|EPOCHREALTIME|EPOCHSECONDS|EUID|FUNCNAME|GROUPS|HISTCMD|HOSTNAME|HOSTTYPE|LINENO|LINES|MACHTYPE|OPTIND|OSTYPE|PIPESTATUS|PPID|PWD|RANDOM|SECONDS|SHELLOPTS|SHLVL|SRANDOM|UID|_) ;;
      *) [[ $__delta_secrets == *" $__delta_n "* ]] || __delta_keep+=("$__delta_n") ;;
    esac
  done
  builtin compgen -A function >> "$__delta_dir/names.fns"
  builtin mapfile -t __delta_names < "$__delta_dir/names.fns"
  __delta_fns=()
  for __delta_n in "${__delta_names[@]}"; do
    [[ $__delta_n == __delta_* ]] || __delta_fns+=("$__delta_n")
  done
  {
    (( ${#__delta_keep[@]} == 0 )) || builtin declare -p -- "${__delta_keep[@]}"
    (( ${#__delta_fns[@]} == 0 )) || builtin declare -f -- "${__delta_fns[@]}"
    builtin alias -p
  } >> "$__delta_dir/env.next"
  builtin pwd >> "$__delta_dir/work_dir.next"
  builtin exit "$__delta_rc"
}
builtin trap __delta_save EXIT
builtin source -- "$__delta_dir/options.sh"
\builtin source -- "$__delta_dir/command.sh"
\__delta_save
