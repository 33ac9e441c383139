# Source at the start of a device command that wants an editable install: installs rooflint (editable)
# and any wheels carried in .whl/ (dask and its dependencies for the fleet scripts).
# The device has no package registry; wheels travel in .whl/ (git-ignored) via the device tool's carry.
if ls .whl/*.whl >/dev/null 2>&1; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl \
    && export PYTHONPATH=/tmp/site${PYTHONPATH:+:$PYTHONPATH}
fi
python3 -m pip install -q --no-deps --no-build-isolation -e . >/dev/null 2>&1 || echo "rooflint install failed"
export PYTHONUNBUFFERED=1
