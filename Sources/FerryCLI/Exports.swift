// `ferry serve` is the deployed server's command (`ferry-server`), shared with it, and so are
// the CLI's refusal and output helpers.
@_exported import FerryServeCommand
