//! `plan.yaml`: the orchestration plan model, validation and fan-out expansion.
