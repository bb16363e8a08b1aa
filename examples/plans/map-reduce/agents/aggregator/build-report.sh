#!/bin/sh
# Builds report.md in the workspace from summaries/*.txt ("<file>\t<n> words\t<m> lines").
set -eu
{
  echo "# Word count report"
  echo
  echo "| file | words | lines |"
  echo "|---|---|---|"
  sort summaries/*.txt | awk -F '\t' '{ print "| " $1 " | " $2 " | " $3 " |" }'
  echo
  echo "Files: $(ls summaries/*.txt | wc -l), total words: $(cat summaries/*.txt | awk -F '\t' '{ split($2, w, " "); s += w[1] } END { print s }')"
} > report.md
cat report.md
