#!/usr/bin/env bash
# The library peers (FlashAttention-4, quack, Liger-Kernel and the CuTe DSL they run on) for a GPU
# machine that reaches no package index. scripts/peers_pack.sh packs their installed tree as one xz
# tarball in three pieces, .peers1/ .peers2/ .peers3/: the CuTe DSL runtime alone is larger than one
# device call may carry. Carry them over two calls to the same warm machine (two pieces fit one call
# beside the working tree) and source this script in each; once the three are there it unpacks them into /tmp/peersite and puts that tree (and the CuTe
# DSL's own packages, whose .pth file a plain PYTHONPATH entry skips) on PYTHONPATH.
# FlashInfer travels apart as .peers4/flashinfer.tar.xz (13 MB; carry it beside any piece): it is
# unpacked into /tmp/peersite2 and put on PYTHONPATH too.
#   . scripts/device/peers.sh      # with carry [".peers1", ".peers2"], then [".peers3", ".peers4"]
parts=/tmp/rooflint-peer-parts
mkdir -p "$parts"
for piece in .peers1 .peers2 .peers3; do
  [ -d "$piece" ] && cp -n "$piece"/peerpart.* "$parts"/ 2>/dev/null
done
if [ ! -d /tmp/peersite ]; then
  if [ "$(ls "$parts" | wc -l)" -eq 3 ]; then
    cat "$parts"/peerpart.* | xz -d | tar x -C /tmp && echo "peers: unpacked into /tmp/peersite"
  else
    echo "peers: $(ls "$parts" | wc -l) of 3 pieces here; carry the next one"
  fi
fi
if [ -f .peers4/flashinfer.tar.xz ] && [ ! -d /tmp/peersite2 ]; then
  xz -dc .peers4/flashinfer.tar.xz | tar x -C /tmp && echo "peers: FlashInfer unpacked into /tmp/peersite2"
fi
if [ -d /tmp/peersite ]; then
  export PYTHONPATH=/tmp/peersite:/tmp/peersite/nvidia_cutlass_dsl/dsl_packages${PYTHONPATH:+:$PYTHONPATH}
fi
if [ -d /tmp/peersite2 ]; then
  export PYTHONPATH=/tmp/peersite2${PYTHONPATH:+:$PYTHONPATH}
fi
