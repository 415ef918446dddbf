import Foundation

/// A refusal the user can act on: printed as one line, exit status 1.
public struct CommandFailure: Error, CustomStringConvertible {
    public var description: String
    public init(_ description: String) { self.description = description }
}

/// Prints a line unbuffered, so a script reading our output through a pipe sees it at once.
public func printNow(_ line: String) {
    FileHandle.standardOutput.write(Data((line + "\n").utf8))
}
