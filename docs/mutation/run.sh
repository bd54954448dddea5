#!/bin/bash
# Mutation runner (docs/crash-model.md §15).
# usage: docs/mutation/run.sh NAME SUITE...   SUITE = crate:test[:filter]  (test "lib" = --lib)
# Applies docs/mutation/NAME.patch, runs the suites in order until one fails, reverts the
# patch, and appends "NAME KILLED|SURVIVED|TIMEOUT|BUILD-ERROR <details>" to
# target/mutation/results.txt (suite output in target/mutation/logs/).
here=$(cd "$(dirname "$0")" && pwd)
cd "$here/../.." || exit 1
name=$1; shift
P=$here/$name.patch
OUT=target/mutation; LOG=$OUT/logs; mkdir -p $LOG
RES=$OUT/results.txt
git apply "$P" || { echo "$name APPLY-FAILED" >> $RES; exit 1; }
verdict=SURVIVED; by=""
for s in "$@"; do
  IFS=: read pkg tgt filt <<< "$s"
  if [ "$tgt" = lib ]; then targ="--lib"; else targ="--test $tgt"; fi
  start=$(date +%s)
  # No shrinking: a failing proptest case is enough, and shrinking a crash test is slow.
  PROPTEST_MAX_SHRINK_ITERS=0 PROPTEST_MAX_SHRINK_TIME=1 timeout 1200 \
    cargo test --release -q -p $pkg $targ -- $filt > $LOG/$name.$pkg.$tgt.log 2>&1
  rc=$?
  dur=$(( $(date +%s) - start ))
  if [ $rc -eq 124 ]; then verdict=TIMEOUT; by="$s (${dur}s)"; break; fi
  if grep -q "^error\(\[E[0-9]*\]\)\?:" $LOG/$name.$pkg.$tgt.log && ! grep -q "test result" $LOG/$name.$pkg.$tgt.log; then
    verdict=BUILD-ERROR; by="$s"; break
  fi
  if [ $rc -ne 0 ]; then
    failed=$(grep -E "^    [a-z_:0-9]+$" $LOG/$name.$pkg.$tgt.log | head -5 | tr -d ' ' | tr '\n' ',')
    verdict=KILLED; by="$s [$failed] (${dur}s)"; break
  fi
  by="$by $s ok(${dur}s)"
done
# A failing proptest case is recorded in its regressions file: keep the committed ones.
git checkout -q -- $(git ls-files "*.proptest-regressions")
git apply -R "$P" || { echo "REVERT FAILED $name" >> $RES; exit 2; }
echo "$name $verdict $by" >> $RES
echo "$name $verdict $by"
