import Foundation
import TestSupport
import Testing

@testable import Digests

/// Private keys as users hand them over (made by the openssl command line): what is read, what is
/// refused and in which words, and that no input crashes the reader.
@Suite struct SigningKeyTests {
    let keys = TestKeys()

    @Test func readsTheFourSupportedShapes() throws {
        let expected: [(TestKeys.Kind, JWTAlgorithm, Int, String)] = [
            (.rsaPKCS1, .rs256, 2048, "-----BEGIN RSA PRIVATE KEY-----"),
            (.rsaPKCS8, .rs256, 2048, "-----BEGIN PRIVATE KEY-----"),
            (.ecSEC1, .es256, 256, "-----BEGIN EC PRIVATE KEY-----"),
            (.ecPKCS8, .es256, 256, "-----BEGIN PRIVATE KEY-----"),
        ]
        for (kind, algorithm, bits, firstLine) in expected {
            let pem = try keys.bytes(kind)
            // The file is the shape the case names (openssl's defaults change between releases).
            #expect(String(decoding: pem, as: UTF8.self).hasPrefix(firstLine), "\(kind)")
            let key = try SigningKey.parsePEM(pem)
            #expect(key.algorithm == algorithm, "\(kind)")
            #expect(key.bits == bits, "\(kind)")
            let signature = try key.sign(Array("payload".utf8), algorithm: algorithm)
            #expect(signature.count == (algorithm == .rs256 ? 256 : 64), "\(kind)")
        }
    }

    /// Text before and after the block (comments, a certificate beside the key) is OpenSSL's to skip.
    @Test func readsAKeyAmongOtherText() throws {
        let key = String(decoding: try keys.bytes(.ecSEC1), as: UTF8.self)
        let certificate = String(decoding: try keys.bytes(.certificate), as: UTF8.self)
        for text in ["Bag Attributes\n  friendlyName: app\n" + key + "trailing words\n", certificate + key, key + certificate] {
            #expect(try SigningKey.parsePEM(text).algorithm == .es256)
        }
    }

    @Test func refusesWithFixedTexts() throws {
        let rsa = String(decoding: try keys.bytes(.rsaPKCS1), as: UTF8.self)
        let ec = String(decoding: try keys.bytes(.ecPKCS8), as: UTF8.self)
        let cases: [(String, String, SigningKeyError, String)] = [
            ("rsa 1024", String(decoding: try keys.bytes(.rsa1024), as: UTF8.self), .rsaTooSmall(bits: 1024), "RSA key of 1024 bits: at least 2048"),
            (
                "ec p-384", String(decoding: try keys.bytes(.ecP384), as: UTF8.self), .ecCurveNotP256(curve: "secp384r1"),
                "EC key on curve secp384r1: ES256 needs P-256"
            ),
            (
                "ed25519", String(decoding: try keys.bytes(.ed25519), as: UTF8.self), .unsupportedKeyType,
                "unsupported key type: RS256 needs an RSA key, ES256 an EC P-256 key"
            ),
            (
                "encrypted pkcs8", String(decoding: try keys.bytes(.encryptedPKCS8), as: UTF8.self), .encrypted,
                "encrypted private keys are not supported: decrypt it (openssl pkey -in K -out K2)"
            ),
            (
                "encrypted pkcs1", String(decoding: try keys.bytes(.encryptedLegacy), as: UTF8.self), .encrypted,
                "encrypted private keys are not supported: decrypt it (openssl pkey -in K -out K2)"
            ),
            (
                "certificate", String(decoding: try keys.bytes(.certificate), as: UTF8.self), .publicKeyOrCertificate,
                "a public key or certificate, not a private key"
            ),
            (
                "public key", String(decoding: try keys.bytes(.publicKey), as: UTF8.self), .publicKeyOrCertificate,
                "a public key or certificate, not a private key"
            ),
            (
                "two keys", rsa + ec, .multiplePrivateKeys, "more than one private key in the PEM: keep only the one to sign with"
            ),
            (
                "empty", "", .notPEMPrivateKey,
                "not a PEM private key (expected -----BEGIN PRIVATE KEY-----, RSA PRIVATE KEY or EC PRIVATE KEY)"
            ),
            (
                "openssh", "-----BEGIN OPENSSH PRIVATE KEY-----\nb3BlbnNzaC1rZXktdjEAAAAABG5vbmUAAAAEbm9uZQ\n-----END OPENSSH PRIVATE KEY-----\n",
                .openSSHFormat, "an OpenSSH private key: convert it to PEM (ssh-keygen -p -m PKCS8 -f K)"
            ),
            ("dsa", "-----BEGIN DSA PRIVATE KEY-----\nMIIBuwIBAAKBgQ\n-----END DSA PRIVATE KEY-----\n", .unsupportedKeyType, ""),
            ("base64 without armor", String(rsa.split(separator: "\n")[1]), .notPEMPrivateKey, ""),
            ("truncated", String(rsa.prefix(rsa.count / 2)), .unreadable, "the PEM private key is damaged: OpenSSL cannot read it"),
            ("damaged base64", rsa.replacingOccurrences(of: "a", with: "*"), .unreadable, ""),
            ("too large", String(repeating: "x", count: SigningKey.maxPEMBytes) + ec, .notPEMPrivateKey, ""),
        ]
        for (name, text, error, words) in cases {
            #expect(throws: error, "\(name)") { try SigningKey.parsePEM(text) }
            if !words.isEmpty { #expect(error.description == words, "\(name)") }
            // No line of the key's base64 (nor the passphrase canary) reaches the text.
            for line in text.split(separator: "\n") where line.count >= 16 && !line.hasPrefix("-----") {
                #expect(!error.description.contains(line), "\(name)")
            }
        }
    }

    @Test func refusesAnAlgorithmTheKeyCannotMake() throws {
        let rsa = try SigningKey.parsePEM(try keys.bytes(.rsaPKCS8))
        let ec = try SigningKey.parsePEM(try keys.bytes(.ecSEC1))
        #expect(throws: SigningKeyError.algorithmMismatch(key: .rs256, requested: .es256)) { try rsa.sign([1], algorithm: .es256) }
        #expect(throws: SigningKeyError.algorithmMismatch(key: .es256, requested: .rs256)) { try ec.sign([1], algorithm: .rs256) }
        #expect(SigningKeyError.algorithmMismatch(key: .es256, requested: .rs256).description == "a key for ES256 (EC P-256) cannot sign RS256")
    }

    /// JWS wants `R || S` (RFC 7518 §3.4): 32 bytes each, short integers left-padded.
    @Test func convertsDERSignaturesToFixedWidth() {
        // SEQUENCE { INTEGER 1, INTEGER 0x00FF (a leading zero keeps it positive) }
        let raw = SigningKey.rawECDSASignature(fromDER: [0x30, 0x07, 0x02, 0x01, 0x01, 0x02, 0x02, 0x00, 0xFF])
        #expect(raw == [UInt8](repeating: 0, count: 31) + [1] + [UInt8](repeating: 0, count: 31) + [0xFF])
        #expect(SigningKey.rawECDSASignature(fromDER: []) == nil)
        #expect(SigningKey.rawECDSASignature(fromDER: [0x30, 0x03, 0x02, 0x01]) == nil)
        // An integer wider than 32 bytes cannot be a P-256 signature half.
        #expect(
            SigningKey.rawECDSASignature(fromDER: [0x30, 0x25, 0x02, 0x21, 0x01] + [UInt8](repeating: 7, count: 32) + [0x02, 0x01, 0x01]) == nil)
    }

    /// Random bytes, random base64 in a key's armor, and valid keys with bytes changed or cut: each
    /// is read or refused, never a crash (fixed seed: the same inputs every run).
    @Test func garbageNeverCrashes() throws {
        var random = SeededGenerator(seed: 7523)
        let valid = try [TestKeys.Kind.rsaPKCS1, .ecSEC1, .ecPKCS8].map { try keys.bytes($0) }
        let alphabet = Array("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/=\n".utf8)
        var read = 0
        for round in 0..<1500 {
            var input: [UInt8]
            switch round % 4 {
            case 0:
                input = (0..<Int.random(in: 0...600, using: &random)).map { _ in UInt8.random(in: 0...255, using: &random) }
            case 1:
                let label = ["PRIVATE KEY", "RSA PRIVATE KEY", "EC PRIVATE KEY"].randomElement(using: &random)!
                let body = (0..<Int.random(in: 0...900, using: &random)).map { _ in alphabet.randomElement(using: &random)! }
                input = Array("-----BEGIN \(label)-----\n".utf8) + body + Array("\n-----END \(label)-----\n".utf8)
            case 2:
                input = valid.randomElement(using: &random)!
                for _ in 0..<Int.random(in: 1...4, using: &random) {
                    let index = Int.random(in: 0..<input.count, using: &random)
                    input[index] = alphabet.randomElement(using: &random)!
                }
            default:
                let source = valid.randomElement(using: &random)!
                input = Array(source.prefix(Int.random(in: 0...source.count, using: &random)))
            }
            if let key = try? SigningKey.parsePEM(input) {
                read += 1
                _ = try? key.sign(Array("message".utf8), algorithm: key.algorithm)
            }
        }
        // Changed base64 characters now and then leave a readable key (a changed padding bit or
        // a line the decoder skips); most inputs are refused.
        #expect(read < 1500)
    }
}
