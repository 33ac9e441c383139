# Source at the start of a device command that wants an editable install: installs rooflint (editable)
# and any wheels carried in .whl/ (dask and its dependencies for the fleet scripts).
# The device has no package registry; wheels travel in .whl/ (git-ignored) via the device tool's carry.
if ls .whl/*.whl >/dev/null 2>&1; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl \
    && export PYTHONPATH=/tmp/site${PYTHONPATH:+:$PYTHONPATH}
fi
python3 -m pip install -q --no-deps --no-build-isolation -e . >/dev/null 2>&1 || echo "rooflint install failed"
export PYTHONUNBUFFERED=1
# The root conftest turns Triton's CPU interpreter on for the CPU suite; on the GPU machine the
# kernels run on the GPU.
export TRITON_INTERPRET=0
# One line each: the GPU with its clocks, and the versions that decide what the kernels compile to.
describe_gpu() {
  nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm --format=csv,noheader 2>&1 | head -1
  python3 -c "import torch, triton; print('torch', torch.__version__, 'cuda', torch.version.cuda, 'triton', triton.__version__)"
}
