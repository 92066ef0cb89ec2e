import Foundation
import PosixSupport
import ScopeConfig
import ScopePolicy
import Testing

@testable import SecretStore

/// A fresh directory per test, removed afterwards.
private final class TemporaryDirectory {
    let path: String
    init() {
        path = NSTemporaryDirectory() + "scopeproxy-secrets-" + UUID().uuidString
        try! FileManager.default.createDirectory(atPath: path, withIntermediateDirectories: true)
    }
    deinit { try? FileManager.default.removeItem(atPath: path) }

    func write(_ name: String, _ contents: String, mode: Int) -> String {
        let file = path + "/" + name
        precondition(FileManager.default.createFile(atPath: file, contents: Data(contents.utf8)), "cannot create \(file)")
        chmod(file, mode_t(mode))
        return file
    }
}

private func loadError(_ source: SecretSource, store: String = "/nonexistent") -> SecretError? {
    do {
        try SecretStore(sources: ["s": source], storeDirectory: store).load()
        return nil
    } catch {
        return error
    }
}

@Suite("Secret store", .serialized)
struct SecretStoreTests {
    @Test("a PEM block loads only as a private key: any other secret is refused with the reason, never its bytes")
    func pemOnlyAsPrivateKey() throws {
        let directory = TemporaryDirectory()
        let pem = "-----BEGIN PRIVATE KEY-----\nCANARYpemline0123456789\n-----END PRIVATE KEY-----\n"
        let file = directory.write("key.pem", pem, mode: 0o600)
        let asKey = SecretStore(sources: ["key": .file(path: file, allowGroupRead: false)], storeDirectory: directory.path, privateKeys: ["key"])
        try asKey.load()
        #expect(asKey.value(of: "key")?.exposedBytes == Array(pem.utf8.dropLast()))
        #expect(asKey.scannedValues.isEmpty && asKey.allValues.count == 1)
        let error = loadError(.file(path: file, allowGroupRead: false))
        #expect(error?.description.contains("is a PEM block") == true)
        #expect(error?.description.contains("CANARY") == false)
    }

    @Test("a 0600 file is read with one trailing newline removed")
    func fileSecret() throws {
        let directory = TemporaryDirectory()
        let file = directory.write("token", "CANARY-file-7a2c\n", mode: 0o600)
        let store = SecretStore(sources: ["token": .file(path: file, allowGroupRead: false)], storeDirectory: directory.path)
        try store.load()
        #expect(store.value(of: "token")?.exposedBytes == Array("CANARY-file-7a2c".utf8))
    }

    @Test("file and env values are the exact bytes read: UTF-8 and non-UTF-8 alike, one trailing newline removed")
    func exactBytes() throws {
        let directory = TemporaryDirectory()
        let value: [UInt8] = Array("CANARY-utf8-".utf8) + [0xC3, 0xA9, 0xE2, 0x82, 0xAC, 0x2D, 0xE9, 0xFF, 0x09, 0x41]
        let file = directory.path + "/bytes"
        #expect(FileManager.default.createFile(atPath: file, contents: Data(value + [0x0A]), attributes: [.posixPermissions: 0o600]))
        setenv("SCOPEPROXY_TEST_BYTES", value.map { CChar(bitPattern: $0) } + [0], 1)
        defer { unsetenv("SCOPEPROXY_TEST_BYTES") }
        let store = SecretStore(
            sources: ["file": .file(path: file, allowGroupRead: false), "env": .env("SCOPEPROXY_TEST_BYTES")],
            storeDirectory: directory.path)
        try store.load()
        let fromFile = store.value(of: "file")?.exposedBytes == value
        let fromEnvironment = store.value(of: "env")?.exposedBytes == value
        #expect(fromFile)
        #expect(fromEnvironment)
    }

    @Test("unsafe files are refused at load, naming the secret and never the value")
    func refusals() {
        let directory = TemporaryDirectory()
        let canary = "CANARY-leak-99d1"
        let world = directory.write("world", canary, mode: 0o604)
        let group = directory.write("group", canary, mode: 0o640)
        let crlf = directory.write("crlf", "a\r\nX-Evil: \(canary)", mode: 0o600)
        let empty = directory.write("empty", "\n", mode: 0o600)
        let cases: [(SecretSource, String)] = [
            (.file(path: world, allowGroupRead: true), "world-accessible"),
            (.file(path: group, allowGroupRead: false), "group-readable"),
            (.file(path: crlf, allowGroupRead: false), "CR, LF or NUL"),
            (.file(path: empty, allowGroupRead: false), "empty"),
            (.file(path: directory.path + "/missing", allowGroupRead: false), "missing"),
            (.env("SCOPEPROXY_TEST_UNSET_VARIABLE"), "not set"),
        ]
        for (source, expected) in cases {
            let error = loadError(source)
            #expect(error?.description.contains("secret 's'") == true)
            #expect(error?.description.contains(expected) == true, "\(source)")
            #expect(error?.description.contains(canary) == false)
        }
        #expect(loadError(.file(path: group, allowGroupRead: true)) == nil, "group read is allowed when asked (fsGroup)")
    }

    @Test("control bytes other than HTAB are refused (file and env), naming the secret and never the value")
    func controlBytes() {
        let directory = TemporaryDirectory()
        let canary = "CANARY-control-\(UInt32.random(in: 0...UInt32.max))"
        // CR, LF and NUL inject headers; the rest (ESC, BEL, DEL...) are not field-value bytes either.
        for control in ["\u{01}", "\u{07}", "\u{1B}", "\u{7F}", "\u{0B}"] {
            let file = directory.write("control", canary + control + "x", mode: 0o600)
            let error = loadError(.file(path: file, allowGroupRead: false))
            #expect(error?.description.contains("secret 's'") == true, "\(control.unicodeScalars.first!.value)")
            #expect(error?.description.contains("control") == true)
            #expect(error?.description.contains(canary) == false)
            setenv("SCOPEPROXY_TEST_CONTROL", canary + control, 1)
            let fromEnvironment = loadError(.env("SCOPEPROXY_TEST_CONTROL"))
            #expect(fromEnvironment?.description.contains("secret 's'") == true)
            #expect(fromEnvironment?.description.contains(canary) == false)
        }
        unsetenv("SCOPEPROXY_TEST_CONTROL")
        let tab = directory.write("tab", "CANARY-tab\tvalue", mode: 0o600)
        #expect(loadError(.file(path: tab, allowGroupRead: false)) == nil, "HTAB is allowed inside a field value")
    }

    @Test("a file owned by another user (root excepted) is refused")
    func otherOwner() throws {
        guard geteuid() == 0 else { return }  // only root can hand a file to another user
        let directory = TemporaryDirectory()
        let file = directory.write("token", "value", mode: 0o600)
        #expect(chown(file, 65534, 65534) == 0)
        #expect(loadError(.file(path: file, allowGroupRead: false))?.description.contains("owned by another user") == true)
    }

    @Test("rotation: an atomic rename and a Kubernetes ..data symlink swap are both picked up")
    func rotation() throws {
        let directory = TemporaryDirectory()
        let file = directory.write("token", "first", mode: 0o600)
        // Kubernetes layout: token -> ..data/token, ..data -> ..2026_v1
        try FileManager.default.createDirectory(atPath: directory.path + "/..v1", withIntermediateDirectories: true)
        _ = directory.write("..v1/k8s", "k8s-first", mode: 0o640)
        try FileManager.default.createSymbolicLink(atPath: directory.path + "/..data", withDestinationPath: "..v1")
        try FileManager.default.createSymbolicLink(atPath: directory.path + "/k8s", withDestinationPath: "..data/k8s")

        let store = SecretStore(
            sources: [
                "token": .file(path: file, allowGroupRead: false),
                "k8s": .file(path: directory.path + "/k8s", allowGroupRead: true),
            ], storeDirectory: directory.path)
        try store.load()
        #expect(store.refresh().changed.isEmpty, "nothing changed yet")

        _ = directory.write("token.new", "second", mode: 0o600)
        #expect(rename(directory.path + "/token.new", file) == 0)
        try FileManager.default.createDirectory(atPath: directory.path + "/..v2", withIntermediateDirectories: true)
        _ = directory.write("..v2/k8s", "k8s-second", mode: 0o640)
        try FileManager.default.createSymbolicLink(atPath: directory.path + "/..data_tmp", withDestinationPath: "..v2")
        #expect(rename(directory.path + "/..data_tmp", directory.path + "/..data") == 0)

        let result = store.refresh()
        #expect(Set(result.changed) == ["token", "k8s"])
        #expect(store.value(of: "token")?.exposedBytes == Array("second".utf8))
        #expect(store.value(of: "k8s")?.exposedBytes == Array("k8s-second".utf8))

        chmod(file, 0o644)
        let unsafe = store.refresh()
        #expect(unsafe.errors.map(\.name) == ["token"])
        #expect(store.value(of: "token") == nil, "a file that became world-readable is dropped (fail closed)")
    }

    @Test("the local store: set writes 0600 in a 0700 directory, list shows names only, rm removes")
    func localStore() throws {
        let directory = TemporaryDirectory()
        let store = LocalSecretDirectory(path: directory.path + "/nested/secrets")
        try store.set("github", bytes: Array("CANARY-gh-31f0".utf8))
        try store.set("cdn", bytes: Array("CANARY-cdn-0b2e".utf8))
        #expect(store.list() == ["cdn", "github"])
        let attributes = try FileManager.default.attributesOfItem(atPath: store.path + "/github")
        #expect((attributes[.posixPermissions] as? Int) == 0o600)
        let directoryAttributes = try FileManager.default.attributesOfItem(atPath: store.path)
        #expect((directoryAttributes[.posixPermissions] as? Int) == 0o700)
        let secrets = SecretStore(sources: ["gh": .store("github")], storeDirectory: store.path)
        try secrets.load()
        #expect(secrets.value(of: "gh")?.exposedBytes == Array("CANARY-gh-31f0".utf8))
        try store.remove("github")
        #expect(store.list() == ["cdn"])
        #expect(throws: LocalSecretDirectory.Failure.self) { try store.set("../escape", bytes: Array("x".utf8)) }
        #expect(throws: LocalSecretDirectory.Failure.self) { try store.set("ok", bytes: Array("two\nlines".utf8)) }
        #expect(throws: LocalSecretDirectory.Failure.self) { try store.set("ok", bytes: [0x41, 0x1B, 0x42]) }
        let nonASCII: [UInt8] = [0x43, 0xC3, 0xA9, 0xE9, 0xFF]
        try store.set("raw", bytes: nonASCII)
        let stored = try [UInt8](Data(contentsOf: URL(fileURLWithPath: store.path + "/raw")))
        #expect(stored == nonASCII, "stored as given")
    }

    @Test("a missing store entry's hint: with a config file it names it (--config, one shell word); without one, the default store's command")
    func storeEntryHint() throws {
        let directory = TemporaryDirectory()
        let withConfig = SecretStore(sources: ["s": .store("cdn")], storeDirectory: directory.path, configPath: "/etc/scopeproxy/c.yaml")
        #expect(withConfig.problems().first?.reason.hasSuffix("(add it with: scopeproxy secret set cdn --config /etc/scopeproxy/c.yaml)") == true)
        let embedded = SecretStore(sources: ["s": .store("cdn")], storeDirectory: directory.path)
        #expect(embedded.problems().first?.reason.hasSuffix("(add it with: scopeproxy secret set cdn)") == true)
        #expect(SecretStore.shellWord("configs/it's mine.yaml") == #"'configs/it'\''s mine.yaml'"#)
        #expect(SecretStore.shellWord("a$(x).yaml") == "'a$(x).yaml'")
    }

    @Test("a relative store or CA directory is made under the working directory, 0700, parents included")
    func relativePrivateDirectory() throws {
        // The helper used to prefix every component with "/", turning `secrets/dir` into /secrets/dir.
        let directory = TemporaryDirectory()
        let previous = FileManager.default.currentDirectoryPath
        defer { _ = FileManager.default.changeCurrentDirectoryPath(previous) }
        #expect(FileManager.default.changeCurrentDirectoryPath(directory.path))
        #expect(PrivateDirectory.create("nested/secrets") == nil)
        var info = stat()
        #expect(stat(directory.path + "/nested/secrets", &info) == 0)
        #expect(info.st_mode & 0o777 == 0o700)
        #expect(access("/nested", F_OK) != 0, "nothing made at the root")
    }
}
