"""Pure core: model, state machine, digests, ids. No I/O."""
