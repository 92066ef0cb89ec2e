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
    @Test("a 0600 file is read with one trailing newline removed")
    func fileSecret() throws {
        let directory = TemporaryDirectory()
        let file = directory.write("token", "CANARY-file-7a2c\n", mode: 0o600)
        let store = SecretStore(sources: ["token": .file(path: file, allowGroupRead: false)], storeDirectory: directory.path)
        try store.load()
        #expect(store.value(of: "token")?.exposedValue == "CANARY-file-7a2c")
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

        let store = SecretStore(sources: [
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
        #expect(store.value(of: "token")?.exposedValue == "second")
        #expect(store.value(of: "k8s")?.exposedValue == "k8s-second")

        chmod(file, 0o644)
        let unsafe = store.refresh()
        #expect(unsafe.errors.map(\.name) == ["token"])
        #expect(store.value(of: "token") == nil, "a file that became world-readable is dropped (fail closed)")
    }

    @Test("the local store: set writes 0600 in a 0700 directory, list shows names only, rm removes")
    func localStore() throws {
        let directory = TemporaryDirectory()
        let store = LocalSecretDirectory(path: directory.path + "/nested/secrets")
        try store.set("github", value: "CANARY-gh-31f0")
        try store.set("cdn", value: "CANARY-cdn-0b2e")
        #expect(store.list() == ["cdn", "github"])
        let attributes = try FileManager.default.attributesOfItem(atPath: store.path + "/github")
        #expect((attributes[.posixPermissions] as? Int) == 0o600)
        let directoryAttributes = try FileManager.default.attributesOfItem(atPath: store.path)
        #expect((directoryAttributes[.posixPermissions] as? Int) == 0o700)
        let secrets = SecretStore(sources: ["gh": .store("github")], storeDirectory: store.path)
        try secrets.load()
        #expect(secrets.value(of: "gh")?.exposedValue == "CANARY-gh-31f0")
        try store.remove("github")
        #expect(store.list() == ["cdn"])
        #expect(throws: LocalSecretDirectory.Failure.self) { try store.set("../escape", value: "x") }
        #expect(throws: LocalSecretDirectory.Failure.self) { try store.set("ok", value: "two\nlines") }
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
