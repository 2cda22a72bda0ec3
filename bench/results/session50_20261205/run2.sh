#!/usr/bin/env bash
# Session 50, run 2 (device tool, on branch s50-final 819f2bf = main 34a08eb + s50-next (s49-next without v3.55)
# + s47-default (fp16-lowrank the default); `bash scripts/device_prebuild.sh` here, then carry
# [".gproj_commit", ".prebuilt"]): the whole device check with the chained benchmark rows.
GPROJ_COMMIT=819f2bfc4b89 CHAIN_BENCH=8 bash scripts/device_check.sh
