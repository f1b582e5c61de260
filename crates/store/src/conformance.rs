//! The conformance suite every backend passes (filled in by the store work).
