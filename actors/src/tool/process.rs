//! tool::process (placeholder until its module lands).
