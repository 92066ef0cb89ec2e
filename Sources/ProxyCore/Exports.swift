// The settings the core runs on are a leaf module of their own (ScopeConfig builds them without the
// core); every user of the core sees them as before, without an import of its own.
@_exported import ProxySettings
