import ArgumentParser
import DepotClient
import DepotProtocol
import Foundation

/// `depot model show` / `depot model apply FILE`.
struct ModelCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "model", abstract: "Show the model, or define (lightly migrate) it from a file.",
        subcommands: [Show.self, Apply.self], defaultSubcommand: Show.self)

    /// `depot model show`.
    struct Show: AsyncParsableCommand {
        static let configuration = CommandConfiguration(abstract: "Print the current model.")

        @OptionGroup var connection: ConnectionOptions

        @Flag(help: "Print the model as JSON ({version, entities}).")
        var json = false

        func run() async throws {
            let client = try await connection.connect()
            defer { client.abort() }
            let model: ModelGet.Result
            do {
                model = try await client.call(ModelGet.self, Empty())
            } catch {
                throw describe(error, calling: ModelGet.name)
            }
            if json {
                print(JSONWriter.encodePretty(try JSONCoding.encode(model)))
                return
            }
            print(
                "model version \(model.version), \(model.entities.count) entit\(model.entities.count == 1 ? "y" : "ies")"
            )
            for entity in model.entities {
                print("\n\(entity.name)")
                for attribute in entity.attributes {
                    var notes: [String] = []
                    if attribute.optional { notes.append("optional") }
                    if let value = attribute.defaultValue { notes.append("default \(jsonLine(value))") }
                    if attribute.indexed { notes.append("indexed") }
                    if attribute.folded { notes.append("folded") }
                    print(
                        "  \(attribute.name): \(attribute.type.rawValue)\(notes.isEmpty ? "" : "  (" + notes.joined(separator: ", ") + ")")"
                    )
                }
                for relationship in entity.relationships {
                    let arity = relationship.toMany ? "to-many" : "to-one"
                    let inverse = relationship.inverse.map { ", inverse \($0)" } ?? ""
                    print(
                        "  \(relationship.name) -> \(relationship.destination) (\(arity)\(inverse), delete rule \(relationship.deleteRule.rawValue))"
                    )
                }
                for constraint in entity.uniquenessConstraints {
                    print("  unique (\(constraint.joined(separator: ", ")))")
                }
                for index in entity.indexes { print("  index (\(index.joined(separator: ", ")))") }
            }
        }
    }

    /// `depot model apply FILE`.
    struct Apply: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            abstract:
                "Define or lightly migrate the entities a file names ({\"entities\": [...]}); the model's other entities stay as they are."
        )

        @OptionGroup var connection: ConnectionOptions

        @Argument(help: "The model file, or - for standard input.")
        var file: String

        @Flag(help: "Print the result as JSON ({version, changes}).")
        var json = false

        func run() async throws {
            let text: String
            if file == "-" {
                text = "-"
            } else {
                guard let data = FileManager.default.contents(atPath: file) else {
                    throw CLIError("cannot read model file '\(file)'")
                }
                text = String(decoding: data, as: UTF8.self)
            }
            let model = try parseJSONArgument(text, what: "model file '\(file)'")
            guard model["entities"]?.arrayValue != nil else {
                throw CLIError("model file '\(file)' must be an object with an \"entities\" array")
            }
            let client = try await connection.connect()
            defer { client.abort() }
            let result: JSONValue
            do {
                result = try await client.call(method: ModelDefine.name, params: model)
            } catch {
                throw describe(error, calling: ModelDefine.name)
            }
            if json {
                print(jsonLine(result))
                return
            }
            let changes = result["changes"]?.arrayValue?.compactMap(\.stringValue) ?? []
            print(
                "model version \(result["version"]?.intValue ?? 0): \(changes.isEmpty ? "no changes" : "\(changes.count) change\(changes.count == 1 ? "" : "s")")"
            )
            for change in changes { print("  \(change)") }
        }
    }
}
