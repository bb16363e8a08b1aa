//! Agent loading: `agent.yaml` (or legacy `config.yaml`), imports, `hooks.yaml`,
//! `context.yaml` and the `.env` cascade, resolved once into an immutable `ResolvedAgent`.
