import DepotProtocol

/// The model the suites use: the repository's World Cup model (Team, Item).
/// Raw baselines copy the tables `depotd` made for it with ``RawSQLite/copySchema(fromDatabaseAt:)``.
enum BenchmarkModel {
    /// `model/define` params.
    static let defineParams = """
        {"entities":[
          {"name":"Team","attributes":[
            {"name":"teamName","type":"string"},
            {"name":"qualifyingZone","type":"string","indexed":true},
            {"name":"wins","type":"integer","default":0},
            {"name":"imageName","type":"string","optional":true}],
           "uniquenessConstraints":[["teamName"]]},
          {"name":"Item","attributes":[
            {"name":"name","type":"string"},
            {"name":"createdAt","type":"date","indexed":true},
            {"name":"done","type":"boolean","default":false}]}]}
        """

    /// The number of teams seeded.
    static let teamCount = 32

    /// `store/save` params inserting the teams `Team 0` … `Team 31`.
    static var seedTeamsParams: String {
        let objects = (0..<teamCount).map { index in
            #"{"entity":"Team","values":{"teamName":"Team \#(index)","qualifyingZone":"Zone \#(index % 6)","wins":0}}"#
        }
        return #"{"inserted":["# + objects.joined(separator: ",") + "]}"
    }

    /// A fixed date for inserted items, on the wire and as stored (seconds).
    static let itemDate = (wire: "2026-11-22T10:15:30.250Z", seconds: 1_795_342_530.25)

    /// `store/save` params inserting one Item.
    static func insertItemParams(_ index: Int) -> String {
        #"{"inserted":[{"entity":"Item","values":{"name":"item \#(index)","createdAt":"\#(itemDate.wire)","done":false}}]}"#
    }

    /// `store/save` params setting one team's wins.
    static func updateTeamParams(row: Int64, wins: Int) -> String {
        #"{"updated":[{"id":"Team/\#(row)","values":{"wins":\#(wins)}}]}"#
    }
}
