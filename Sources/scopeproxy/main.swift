import ScopeProxyApp

#if canImport(Glibc)
    import Glibc
#endif

exit(Commands.main(Array(CommandLine.arguments.dropFirst())))
