#!/usr/bin/env bash
# The main job: a scripted agent behind a 128 KB gateway, against the bundled simulator.
source "$(dirname "$0")/_env.sh"
exec contextkit demo "$@"
