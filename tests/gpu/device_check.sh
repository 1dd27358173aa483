# One prepared GPU check (tests/gpu/README.md): the direct cuDNN-log capture, then the suite on the host lane with
# --explain=info through the harness, then its report; everything lands in $OUT/gpu.tar.gz.
set -u
T0=$(date +%s)
W=/tmp/gpu; mkdir -p $W/capture
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl || exit 9
export PYTHONPATH=/tmp/site:$PWD/src CONVMATRIX_HOME=/tmp/cmhome CONVMATRIX_PYTHON=$(command -v python3) PYTHONUNBUFFERED=1 CONVMATRIX_HOST=h200box
nvidia-smi > $W/nvidia-smi.txt 2>&1
python3 -c "import torch,sys;print(sys.version);print(torch.__version__,torch.version.cuda,torch.backends.cudnn.version(),torch.cuda.get_device_name(0),torch.cuda.get_device_capability(0))" > $W/stack.txt 2>&1
cat $W/stack.txt
timeout -k 10 150 python3 tests/gpu/capture_cudnn_logs.py $W/capture > $W/capture.txt 2>&1; echo "capture rc=$? at $(( $(date +%s)-T0 ))s"
printf 'name = "gpu-host"\n[[include]]\nlane = "host"\n' > $W/host.toml
cd $W
timeout -k 15 ${SUITE_S:-330} python3 -m convmatrix run -m $W/host.toml --out $W/run --explain=info -- --case-timeout 90 > $W/run.log 2>&1; echo "run rc=$? at $(( $(date +%s)-T0 ))s"
tail -5 $W/run.log
python3 -m convmatrix report $W/run --control host > $W/report.txt 2>&1; echo "report rc=$?"
python3 -m convmatrix report $W/run --control host --format json > $W/report.json 2>&1
head -60 $W/report.txt
python3 - <<'PY'
import pathlib
for f in pathlib.Path("/tmp/gpu").rglob("*.log"):
    if f.is_file() and f.stat().st_size > 1 << 20:
        d = f.read_bytes(); f.write_bytes(d[:1 << 18] + b"\n[...cut by the capture script...]\n" + d[-(1 << 19):])
PY
cd /tmp && tar czf $OUT/gpu-small.tar.gz --exclude='*.log' gpu; tar czf $OUT/gpu.tar.gz gpu; ls -la $OUT; echo "total $(( $(date +%s)-T0 ))s"
