#!/bin/sh
# Example helper run by the `run_helper` tool: prints what the engine passed in.
printf 'args: %s\n' "$*"
