//! Integration tests live in `tests/integration/`; interop in `tests/interop/`.
