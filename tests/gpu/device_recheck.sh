# Second prepared GPU check: the new explain and --rerun-blocking on the illegal-address case
# through the harness, then the two repro scripts convmatrix wrote from the first run's results.
set -u
T0=$(date +%s)
W=/tmp/gpu2; mkdir -p $W
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl || exit 9
export PYTHONPATH=/tmp/site:$PWD/src CONVMATRIX_HOME=/tmp/cmhome CONVMATRIX_PYTHON=$(command -v python3) PYTHONUNBUFFERED=1 CONVMATRIX_HOST=h200box
printf 'name = "gpu-host"\n[[include]]\nlane = "host"\n' > $W/host.toml
R=$PWD
cd $W
timeout -k 10 150 python3 -m convmatrix run -m $W/host.toml --out $W/run --explain --rerun-blocking -- -k wide_channels --case-timeout 90 > $W/run.log 2>&1; echo "run rc=$? at $(( $(date +%s)-T0 ))s"
tail -4 $W/run.log
python3 -m convmatrix report $W/run --control host > $W/report.txt 2>&1; echo "report rc=$?"; grep -E "explained|blocking|CUDA" $W/report.txt | cut -c1-400
timeout -k 5 90 python3 $R/.gpu/r_illegal.py > $W/repro_illegal.txt 2>&1; echo "repro illegal rc=$? at $(( $(date +%s)-T0 ))s"; tail -8 $W/repro_illegal.txt
timeout -k 5 ${SLOW_S:-150} python3 $R/.gpu/r_slow.py > $W/repro_slow.txt 2>&1; echo "repro slow rc=$? at $(( $(date +%s)-T0 ))s"; tail -8 $W/repro_slow.txt
find $W -name '*.log' -size +1M -exec truncate -s 1M {} \;
cd /tmp && tar czf $OUT/gpu2.tar.gz gpu2; ls -la $OUT; echo "total $(( $(date +%s)-T0 ))s"
