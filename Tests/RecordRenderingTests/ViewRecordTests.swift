import Testing

@testable import RecordRendering
