//! tool::observation (placeholder until its module lands).
