import Foundation
import PosixSupport
import TestSupport
import Testing

/// `SmallFile.read` (AWS config files, web identity tokens, read on the credential fetcher's
/// thread) never waits on a FIFO, even one swapped in for a regular file while it looks
/// (attack/aws_chain_hostile.py: web_identity_fifo).
@Suite("small file reads never block")
struct SmallFileRaceTests {
    @Test("a FIFO without a writer is refused at once, as a path and through a symlink")
    func fifoRefused() throws {
        let directory = ScratchDirectory()
        let fifo = directory.path + "/token"
        #expect(mkfifo(fifo, 0o600) == 0)
        #expect(SmallFile.read(fifo, limit: 1024) == .failure(.notARegularFile))
        let link = directory.path + "/link"
        #expect(symlink(fifo, link) == 0)
        #expect(SmallFile.read(link, limit: 1024) == .failure(.notARegularFile))
    }

    @Test("a path that flips between a regular file and a FIFO never holds the reader")
    func flippingPath() throws {
        let directory = ScratchDirectory()
        let path = directory.path + "/token"
        let regular = directory.path + "/regular"
        let fifo = directory.path + "/fifo"
        try "token".write(toFile: regular, atomically: false, encoding: .utf8)
        #expect(mkfifo(fifo, 0o600) == 0)
        let stop = Locked(false)
        let stopped = DispatchSemaphore(value: 0)
        let flipper = Thread {
            var toggle = false
            while !stop.withLock({ $0 }) {
                unlink(path)
                _ = symlink(toggle ? fifo : regular, path)
                toggle.toggle()
            }
            stopped.signal()
        }
        flipper.start()
        defer {
            stop.withLock { $0 = true }
            stopped.wait()
        }
        // Each read ends (a hang here is the bug); what it finds depends on the moment.
        for _ in 0..<20_000 {
            switch SmallFile.read(path, limit: 1024) {
            case .success(let bytes): #expect(bytes == Array("token".utf8))
            case .failure(let failure): #expect([.notARegularFile, .missing].contains(failure))
            }
        }
    }
}
