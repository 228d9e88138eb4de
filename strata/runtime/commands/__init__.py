"""The bodies of the commands that run a model, one module per command, each called by its
`strata.cli` module with the flags parsed: `textgen` (`strata run`, `strata generate`), `chat`,
`call`, `perplexity`, `bench`, `serve`, `tokenize`, `demo`. Each opens its model through
`strata.runtime.opener.open_model` and runs it on the runtime below (the engine, the loop, the
serving engine); nothing below imports a command."""
