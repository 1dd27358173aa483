# Prepared GPU check (issue 37): what this machine's nvidia-smi prints for discovery, kept as test
# data beside the stub outputs in tests/testkit.py (TWO_H100, H200_SLICES), and what discovery
# makes of it. Read-only: it changes no MIG mode and creates no MIG device (the lent machine's
# settings are left as they are), so on a GPU without MIG it records the MIG-off form. Seconds.
set -u
FIELDS=$(PYTHONPATH=src python3 -c "from convmatrix import gpus; print(gpus.FIELDS)") || exit 9
nvidia-smi --query-gpu="$FIELDS" --format=csv,noheader,nounits > $OUT/query.txt 2> $OUT/query.err; echo "query rc=$?"
nvidia-smi -L > $OUT/list.txt 2> $OUT/list.err; echo "list rc=$?"
nvidia-smi --query-gpu=driver_version --format=csv,noheader > $OUT/driver.txt 2>&1
nvidia-smi -q -d MIG > $OUT/mig.txt 2>&1  # the MIG section: current and pending mode as nvidia-smi words them
PYTHONPATH=src python3 -c "
from convmatrix import gpus
for g in gpus.discover():
    print(g.key, g.device_key, g.pin, g.selector, repr(g.note))
" > $OUT/discovered.txt 2>&1
head -20 $OUT/*.txt
