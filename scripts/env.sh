# Sourced by Weir's scripts: where caches live (outside the clone).
# WEIR_CACHE holds the cargo target directory, Kafka's Maven artifacts and
# the local broker's data; a second run reuses all of it.
export WEIR_CACHE="${WEIR_CACHE:-$HOME/.cache/weir}"
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-$WEIR_CACHE/target}"
