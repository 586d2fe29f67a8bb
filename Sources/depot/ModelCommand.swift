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
            abstract: "Define the model from a file ({\"entities\": [...]}); lightweight migrations only.",
            discussion: """
                The file is the whole model: an entity it leaves out would be removed (which is refused).
                With --add, its entities are added to the current model, or replace those of the same name.
                """)

        @OptionGroup var connection: ConnectionOptions

        @Argument(help: "The model file, or - for standard input.")
        var file: String

        @Flag(
            help:
                "Add the file's entities to the current model (replacing those of the same name) instead of replacing the model."
        )
        var add = false

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
            var model = try parseJSONArgument(text, what: "model file '\(file)'")
            guard let entities = model["entities"]?.arrayValue else {
                throw CLIError("model file '\(file)' must be an object with an \"entities\" array")
            }
            let client = try await connection.connect()
            defer { client.abort() }
            if add {
                let current: JSONValue
                do {
                    current = try await client.call(method: ModelGet.name, params: nil)
                } catch {
                    throw describe(error, calling: ModelGet.name)
                }
                let added = Set(entities.compactMap { $0["name"]?.stringValue })
                let kept = (current["entities"]?.arrayValue ?? []).filter {
                    !added.contains($0["name"]?.stringValue ?? "")
                }
                model = .object(["entities": .array(kept + entities)])
            }
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
