#!/usr/bin/env bash
# Packs the library peers for scripts/device/peers.sh, on a machine that reaches PyPI: downloads the
# x86-64 CPython 3.12 wheels of FlashAttention-4, quack, Liger-Kernel and the CuTe DSL (its CUDA 13
# runtime), unzips them into one site tree (what pip --target does for wheels with no scripts), drops
# the aarch64 stubs, and writes it as an xz tarball split in three: .peers1/ .peers2/ .peers3/.
# FlashInfer goes apart, in .peers4/: its wheel is 62 MB (426 MB unpacked, mostly generated sources of
# kernels rooflint never builds), so the pack keeps its Python package, headers and the JIT sources of
# everything but the MoE, sampling and Blackwell-only kernels (13 MB as xz). It compiles its kernels
# (norm, RoPE, decode) with the GPU machine's nvcc at first use; the image already holds its other
# imports (packaging, requests, tqdm, nvidia-ml-py), and apache-tvm-ffi comes with the pack above.
#   bash scripts/peers_pack.sh
set -euo pipefail
wheels=$(mktemp -d)
site=$(mktemp -d)/peersite
platforms=""
for tag in manylinux_2_28_x86_64 manylinux_2_27_x86_64 manylinux_2_24_x86_64 manylinux_2_17_x86_64 manylinux2014_x86_64; do
  platforms="$platforms --platform $tag"
done
# shellcheck disable=SC2086
python3 -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp $platforms -d "$wheels" \
  liger-kernel==0.8.5 quack-kernels==0.6.5 flash-attn-4==4.0.0b36 nvidia-cutlass-dsl==4.8.1 \
  nvidia-cutlass-dsl-libs-base==4.8.1 nvidia-cutlass-dsl-libs-core==4.8.1 nvidia-cutlass-dsl-libs-cu13==4.8.1 \
  apache-tvm-ffi==0.1.15.post2 torch-c-dlpack-ext==0.1.5
mkdir -p "$site"
for wheel in "$wheels"/*.whl; do unzip -q -o "$wheel" -d "$site"; done
rm -rf "$site"/nvidia_cutlass_dsl/cu13/lib/stubs/aarch64*
tar cf - -C "$(dirname "$site")" peersite | xz -9 -T0 >"$wheels/peersite.tar.xz"
split -n 3 -d "$wheels/peersite.tar.xz" "$wheels/peerpart."
for i in 0 1 2; do mkdir -p ".peers$((i + 1))" && mv "$wheels/peerpart.0$i" ".peers$((i + 1))/"; done
fisite=$(mktemp -d)/peersite2
python3 -m pip download -q --no-deps --only-binary=:all: -d "$wheels" flashinfer-python==0.7.2.post1
unzip -q -o "$wheels"/flashinfer_python-*.whl 'flashinfer/*' -d "$fisite"
(cd "$fisite/flashinfer/data/csrc" && rm -rf cake_* kda gdn fused_moe experimental blackwell_* alphamoe* nv_internal)
mkdir -p .peers4
tar cf - -C "$(dirname "$fisite")" peersite2 | xz -9 -T0 >.peers4/flashinfer.tar.xz
ls -l .peers1 .peers2 .peers3 .peers4
