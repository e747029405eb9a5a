# The bench's table -> one line per case for ab.txt (ab2json.py, variants2json.py):
#   TAG PRESET OP[SFX] T=TOKENS ROUTING SCHEDULE US us [graph US_IN_GRAPH]
#   awk -F'|' -v tag=TAG -v sfx=SFX -f bench_rows.awk
# The "us_in_graph" column is found by its header: the bench prints it only
# for the calls it times in a graph (small T), and the columns after it move
# when no case of a run has it.
/^\| preset/ {
  g = 0
  for (i = 2; i <= NF; ++i) { h = $i; gsub(/ /, "", h); if (h == "us_in_graph") g = i }
  next
}
/^\| [a-z]/ {
  op = $3; gsub(/ /, "", op)
  printf "%-4s %s %s%s T=%s %s %s %s us", tag, $2, op, sfx, $4, $5, $6, $7
  if (g && $g ~ /[0-9]/) printf " graph %s", $g
  printf "\n"
}
