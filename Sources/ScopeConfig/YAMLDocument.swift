import CYAML

/// A position in the config file, 1-based, as editors show it.
public struct Mark: Sendable, Equatable {
    public let line: Int
    public let column: Int

    /// `FILE:LINE:COLUMN: message`: how config errors and warnings name their place.
    public func located(in file: String, _ message: String) -> String { "\(file):\(line):\(column): \(message)" }
}

/// A YAML node with the position it started at. Only what a config needs: scalars, mappings
/// (ordered, duplicate keys refused), sequences. Anchors/aliases and tags are refused: they make a
/// config harder to read and libyaml reports aliases at the anchor's position.
public indirect enum YAMLValue: Sendable {
    case scalar(String, plain: Bool)
    case mapping([(key: YAMLNode, value: YAMLNode)])
    case sequence([YAMLNode])
}

public struct YAMLNode: Sendable {
    public let value: YAMLValue
    public let mark: Mark

    public var isMapping: Bool {
        if case .mapping = value { return true }
        return false
    }

    /// A plain `null`, `~` or empty scalar.
    public var isNull: Bool {
        if case .scalar(let text, plain: true) = value { return text.isEmpty || text == "null" || text == "~" || text == "Null" || text == "NULL" }
        return false
    }
}

public struct ConfigError: Error, Sendable, Equatable, CustomStringConvertible {
    public let file: String
    public let mark: Mark
    public let message: String

    public init(file: String, mark: Mark, message: String) {
        self.file = file
        self.mark = mark
        self.message = message
    }

    /// `FILE:LINE:COLUMN: message`
    public var description: String { mark.located(in: file, message) }
}

enum YAMLDocument {
    /// Parses one YAML document (an empty file is an empty mapping).
    static func parse(_ text: String, file: String) throws(ConfigError) -> YAMLNode {
        var parser = yaml_parser_t()
        guard yaml_parser_initialize(&parser) == 1 else {
            throw ConfigError(file: file, mark: Mark(line: 1, column: 1), message: "cannot initialize the YAML parser")
        }
        defer { yaml_parser_delete(&parser) }
        let bytes = Array(text.utf8)
        return try bytes.withUnsafeBufferPointer { buffer throws(ConfigError) -> YAMLNode in
            yaml_parser_set_input_string(&parser, buffer.baseAddress, buffer.count)
            var builder = Builder(file: file, lines: text.split(separator: "\n", omittingEmptySubsequences: false))
            return try builder.run(&parser)
        }
    }

    private struct Builder {
        let file: String
        /// The text's lines, to say in plain words what libyaml's messages mean there.
        let lines: [Substring]
        /// An open container: its mark and its children so far. A class, so a child is appended in
        /// place: with values, each append copied the container's children (and a mapping checked
        /// each key against all before it), and a 300 KB file of 20 000 keys took half a minute.
        final class Open {
            let mark: Mark
            let isMapping: Bool
            var pairs: [(key: YAMLNode, value: YAMLNode)] = []
            var keys: Set<String> = []
            var pendingKey: YAMLNode?
            var items: [YAMLNode] = []

            init(mark: Mark, isMapping: Bool) {
                self.mark = mark
                self.isMapping = isMapping
            }
        }
        var stack: [Open] = []
        var root: YAMLNode?
        /// The deepest nesting a config may have. The schema needs six levels; a file nested tens of
        /// thousands deep (`[[[[...`, 100 KB) built a value whose release recursed once per level and
        /// overflowed the stack: `check` crashed and a reload killed the running proxy.
        static let maximumDepth = 32
        var documents = 0

        func error(_ mark: Mark, _ message: String) -> ConfigError {
            ConfigError(file: file, mark: mark, message: message)
        }

        /// libyaml's messages name the parser's state, not the mistake: the usual mistakes, said plainly.
        func hint(_ problem: String, at mark: Mark) -> String {
            let line = mark.line - 1 < lines.count && mark.line >= 1 ? lines[mark.line - 1] : ""
            let character = line.unicodeScalars.dropFirst(max(0, mark.column - 1)).first
            if problem.contains("cannot start any token"), character == "\t" || line.hasPrefix("\t") {
                return " (a tab: YAML indents with spaces only; replace the tab with spaces)"
            }
            if problem.contains("did not find expected key") || problem.contains("did not find expected '-' indicator") {
                return
                    " (this line's indentation does not match the lines above it: YAML nests by indentation, so align it with the keys it belongs with)"
            }
            if problem.contains("mapping values are not allowed") {
                return " (a second ':' on this line: put a space after each key's colon, and quote values that contain ': ')"
            }
            if problem.contains("did not find expected node content") || problem.contains("could not find expected ':'") {
                return " (a key needs ': ' after it, and an unfinished [list] or {map} needs its closing bracket)"
            }
            return ""
        }

        static func mark(_ mark: yaml_mark_t) -> Mark { Mark(line: Int(mark.line) + 1, column: Int(mark.column) + 1) }

        mutating func run(_ parser: inout yaml_parser_t) throws(ConfigError) -> YAMLNode {
            while true {
                var event = yaml_event_t()
                guard yaml_parser_parse(&parser, &event) == 1 else {
                    let problem = parser.problem.map { String(cString: $0) } ?? "invalid YAML"
                    let mark = Self.mark(parser.problem_mark)
                    throw error(mark, "YAML syntax error: \(problem)" + hint(problem, at: mark))
                }
                defer { yaml_event_delete(&event) }
                let mark = Self.mark(event.start_mark)
                switch event.type {
                case YAML_STREAM_END_EVENT:
                    return root ?? YAMLNode(value: .mapping([]), mark: Mark(line: 1, column: 1))
                case YAML_DOCUMENT_START_EVENT:
                    documents += 1
                    if documents > 1 { throw error(mark, "only one YAML document is allowed") }
                case YAML_MAPPING_START_EVENT:
                    try refuseAnchorAndTag(event.data.mapping_start.anchor, event.data.mapping_start.tag, mark)
                    try refuseDepth(at: mark)
                    stack.append(Open(mark: mark, isMapping: true))
                case YAML_SEQUENCE_START_EVENT:
                    try refuseAnchorAndTag(event.data.sequence_start.anchor, event.data.sequence_start.tag, mark)
                    try refuseDepth(at: mark)
                    stack.append(Open(mark: mark, isMapping: false))
                case YAML_MAPPING_END_EVENT:
                    guard let open = stack.popLast(), open.isMapping else { throw error(mark, "unbalanced mapping") }
                    try add(YAMLNode(value: .mapping(open.pairs), mark: open.mark))
                case YAML_SEQUENCE_END_EVENT:
                    guard let open = stack.popLast(), !open.isMapping else { throw error(mark, "unbalanced sequence") }
                    try add(YAMLNode(value: .sequence(open.items), mark: open.mark))
                case YAML_SCALAR_EVENT:
                    let scalar = event.data.scalar
                    try refuseAnchorAndTag(scalar.anchor, scalar.tag, mark)
                    let text = String(decoding: UnsafeBufferPointer(start: scalar.value, count: scalar.length), as: UTF8.self)
                    try add(YAMLNode(value: .scalar(text, plain: scalar.style == YAML_PLAIN_SCALAR_STYLE), mark: mark))
                case YAML_ALIAS_EVENT:
                    throw error(mark, "YAML aliases are not supported in scopeproxy configs")
                default:
                    break
                }
            }
        }

        func refuseDepth(at mark: Mark) throws(ConfigError) {
            guard stack.count < Self.maximumDepth else {
                throw error(mark, "nested deeper than \(Self.maximumDepth) levels: a scopeproxy config needs at most six (a stray '[' or '-'?)")
            }
        }

        func refuseAnchorAndTag(_ anchor: UnsafeMutablePointer<yaml_char_t>?, _ tag: UnsafeMutablePointer<yaml_char_t>?, _ mark: Mark)
            throws(ConfigError)
        {
            if anchor != nil { throw error(mark, "YAML anchors are not supported in scopeproxy configs") }
            if tag != nil { throw error(mark, "YAML tags are not supported in scopeproxy configs") }
        }

        mutating func add(_ node: YAMLNode) throws(ConfigError) {
            guard let top = stack.last else {
                root = node
                return
            }
            guard top.isMapping else {
                top.items.append(node)
                return
            }
            if let key = top.pendingKey {
                top.pairs.append((key: key, value: node))
                top.pendingKey = nil
                return
            }
            guard case .scalar(let name, _) = node.value else { throw error(node.mark, "mapping keys must be plain strings") }
            // libyaml accepts duplicate keys silently; a config must not.
            guard top.keys.insert(name).inserted else { throw error(node.mark, "duplicate key '\(name)'") }
            top.pendingKey = node
        }
    }
}
