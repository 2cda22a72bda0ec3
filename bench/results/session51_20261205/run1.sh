#!/usr/bin/env bash
# Session 51, run 1 (device tool, main 44706f9 with .prebuilt from scripts/device_prebuild.sh of session 50; carry
# [".gproj_commit", ".prebuilt"]): the whole device check with the chained benchmark rows.
GPROJ_COMMIT=44706f9dc5bd CHAIN_BENCH=8 bash scripts/device_check.sh
