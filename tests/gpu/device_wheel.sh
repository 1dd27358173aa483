# Third prepared GPU check (issue 25, item 1): the built wheel, not the checkout, runs a host cell on
# the GPU to a report. The wheel and the two dependencies the machine lacks travel in .whl/; they are
# installed into a folder outside the checkout, and every command runs from another directory.
# Short on purpose (the session had about four minutes of device time left): a conv2d slice of the
# catalog plus the case that failed on this machine before, each file written to $OUT as it is made.
set -u
T0=$(date +%s)
W=/tmp/gw; mkdir -p $W
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl || exit 9
export PYTHONPATH=/tmp/site CONVMATRIX_HOME=/tmp/cmhome CONVMATRIX_PYTHON=$(command -v python3) PYTHONUNBUFFERED=1 CONVMATRIX_HOST=h200box
cd $W
python3 -m convmatrix --version > $OUT/version.txt 2>&1; cat $OUT/version.txt
python3 -c "import convmatrix; print(convmatrix.__file__)" >> $OUT/version.txt
printf 'name = "gpu-wheel"\n[[include]]\nlane = "host"\n' > $W/host.toml
timeout -k 5 ${RUN_S:-80} python3 -m convmatrix run -m $W/host.toml --out $W/run \
  -- -k '(conv2d and not over2g and not compiled and not large) or wide_channels' --case-timeout 20 > $OUT/run.log 2>&1
echo "run rc=$? at $(( $(date +%s)-T0 ))s"; tail -4 $OUT/run.log
python3 -m convmatrix report $W/run --control host > $OUT/report.txt 2>&1; echo "report rc=$?"
python3 -m convmatrix report $W/run --control host --format json > $OUT/report.json 2>&1
head -30 $OUT/report.txt
cd /tmp && tar czf $OUT/run.tar.gz gw/run; ls -la $OUT; echo "total $(( $(date +%s)-T0 ))s"
