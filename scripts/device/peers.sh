#!/usr/bin/env bash
# The library peers (FlashAttention-4, quack, Liger-Kernel and the CuTe DSL they run on) for a GPU
# machine that reaches no package index. scripts/peers_pack.sh packs their installed tree as one xz
# tarball in three pieces, .peers1/ .peers2/ .peers3/: the CuTe DSL runtime alone is larger than one
# device call may carry. Carry them over two calls to the same warm machine (two pieces fit one call
# beside the working tree) and source this script in each; once the three are there it unpacks them into
# /tmp/peers/site-packages and puts that tree (and the CuTe DSL's own packages, whose .pth file a plain
# PYTHONPATH entry skips) on PYTHONPATH. The folder must be named site-packages: quack fingerprints an
# epilogue by the code it calls and stops at functions under a site-packages (or stdlib) folder; from
# any other folder it walks into the CuTe DSL's own globals and raises a TypeError on a ContextVar.
# FlashInfer travels apart as .peers4/flashinfer.tar.xz (13 MB; carry it beside any piece): it is
# unpacked into /tmp/peersite2 and put on PYTHONPATH too.
#   . scripts/device/peers.sh      # with carry [".peers1", ".peers2"], then [".peers3", ".peers4"]
parts=/tmp/rooflint-peer-parts
mkdir -p "$parts"
for piece in .peers1 .peers2 .peers3; do
  [ -d "$piece" ] && cp -n "$piece"/peerpart.* "$parts"/ 2>/dev/null
done
site=/tmp/peers/site-packages
if [ ! -d "$site" ]; then
  if [ "$(ls "$parts" | wc -l)" -eq 3 ]; then
    mkdir -p /tmp/peers && cat "$parts"/peerpart.* | xz -d | tar x -C /tmp/peers \
      && mv /tmp/peers/peersite "$site" && echo "peers: unpacked into $site"
  else
    echo "peers: $(ls "$parts" | wc -l) of 3 pieces here; carry the next one"
  fi
fi
if [ -f .peers4/flashinfer.tar.xz ] && [ ! -d /tmp/peersite2 ]; then
  xz -dc .peers4/flashinfer.tar.xz | tar x -C /tmp && echo "peers: FlashInfer unpacked into /tmp/peersite2"
fi
if [ -d "$site" ]; then
  export PYTHONPATH=$site:$site/nvidia_cutlass_dsl/dsl_packages${PYTHONPATH:+:$PYTHONPATH}
fi
if [ -d /tmp/peersite2 ]; then
  export PYTHONPATH=/tmp/peersite2${PYTHONPATH:+:$PYTHONPATH}
fi
