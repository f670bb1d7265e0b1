import Foundation

/// Klarna's Settlements API v1: what Klarna paid out, and the transactions each payout is made of.
/// Same host and credentials as OM. v1 has no webhook: the reconciler polls.
extension KlarnaClient {
    /// The largest `size` Klarna accepts.
    public static let settlementsMaxPageSize = 500

    /// A walk through a collection that takes more pages than this fails instead of going on
    /// (``allTransactions(paymentReference:orderID:pageSize:beforeEachPage:)``): at the largest page, 5 million rows.
    static let settlementsMaxPages = 10_000

    /// One page of payouts, filtered on the payout date. Whether the bounds are inclusive, and the order of the
    /// payouts, are not documented. `size` is clamped to 1...500.
    public func payouts(
        from: Date? = nil, to: Date? = nil, currency: String? = nil, size: Int = 20, offset: Int = 0
    ) async throws -> PayoutPage {
        let filters = Self.payoutFilters(from: from, to: to, currency: currency)
        return try await decode(
            PayoutPage.self,
            send(
                .listPayouts, "GET", "/settlements/v1/payouts", resource: Self.resourceLabel(filters),
                query: filters + Self.pageQuery(size: size, offset: offset)))
    }

    /// The payout with this `payment_reference` (404 when there is none).
    public func payout(reference: String) async throws -> Payout {
        let path = "/settlements/v1/payouts/\(segment(reference))"
        return try await decode(Payout.self, send(.readPayout, "GET", path, resource: reference))
    }

    /// The payouts between two payout dates summed per currency, one element each. Both dates are required.
    public func payoutSummary(from: Date, to: Date, currency: String? = nil) async throws -> [PayoutSummary] {
        let filters = Self.payoutFilters(from: from, to: to, currency: currency)
        return try await decode(
            [PayoutSummary].self,
            send(
                .payoutSummary, "GET", "/settlements/v1/payouts/summary", resource: Self.resourceLabel(filters),
                query: filters))
    }

    /// One page of settlement transactions, of one payout and/or one order. There is no date filter. `size` is
    /// clamped to 1...500.
    public func transactions(
        paymentReference: String? = nil, orderID: String? = nil, size: Int = 20, offset: Int = 0
    ) async throws -> TransactionPage {
        let filters = Self.transactionFilters(paymentReference: paymentReference, orderID: orderID)
        return try await decode(
            TransactionPage.self,
            send(
                .listTransactions, "GET", "/settlements/v1/transactions", resource: Self.resourceLabel(filters),
                query: filters + Self.pageQuery(size: size, offset: offset)))
    }

    /// Every payout the filters match, page after page (see
    /// ``allTransactions(paymentReference:orderID:pageSize:beforeEachPage:)`` for how the walk ends).
    public func allPayouts(
        from: Date? = nil, to: Date? = nil, currency: String? = nil, pageSize: Int = KlarnaClient.settlementsMaxPageSize,
        beforeEachPage: () async throws -> Void = {}
    ) async throws -> [Payout] {
        try await everyPage(
            PayoutPage.self, .listPayouts, "/settlements/v1/payouts",
            filters: Self.payoutFilters(from: from, to: to, currency: currency), pageSize: pageSize,
            beforeEachPage: beforeEachPage)
    }

    /// Every transaction the filters match, page after page, each page asked for at the offset where the last one
    /// ended. The walk ends at an empty page, once `pagination.total` rows have come, or, when Klarna sends no
    /// total, at the first page without `next` that is shorter than asked for (the spec requires only `count`: a
    /// full page without either may have more behind it, and the next one is asked for). `beforeEachPage` runs
    /// before each request (a caller's rate budget: every page is a call); what it throws ends the walk.
    ///
    /// A server that ignores `offset` would serve its first page forever, so the walk fails (``KlarnaAPIError`` with
    /// ``KlarnaAPIError/Failure/undecodableResponse(status:detail:)``) when a page's `pagination.offset` is not the
    /// offset asked for, when a page without one repeats the page before, when a page is empty before `total` rows
    /// have come, or when it has taken ``settlementsMaxPages`` pages. It fails rather than returning what it
    /// has: a silently short list would show settled money as missing.
    ///
    /// Offsets count into a collection that can change between pages (a new payout); rows that move meanwhile are
    /// missed or repeated. One payout's transactions (`paymentReference`) should stay put, though Klarna does not say
    /// whether a published payout ever changes.
    public func allTransactions(
        paymentReference: String? = nil, orderID: String? = nil, pageSize: Int = KlarnaClient.settlementsMaxPageSize,
        beforeEachPage: () async throws -> Void = {}
    ) async throws -> [SettlementTransaction] {
        try await everyPage(
            TransactionPage.self, .listTransactions, "/settlements/v1/transactions",
            filters: Self.transactionFilters(paymentReference: paymentReference, orderID: orderID), pageSize: pageSize,
            beforeEachPage: beforeEachPage)
    }

    private func everyPage<Page: SettlementsPage>(
        _ type: Page.Type, _ operation: KlarnaOperation, _ path: String, filters: [(String, String)], pageSize: Int,
        beforeEachPage: () async throws -> Void
    ) async throws -> [Page.Item] {
        let resource = Self.resourceLabel(filters)
        let size = Self.pageSize(pageSize)
        var items: [Page.Item] = []
        var offset = 0
        var pages = 0
        var previous: [Page.Item] = []
        while true {
            try await beforeEachPage()
            let answer = try await send(
                operation, "GET", path, resource: resource, query: filters + Self.pageQuery(size: pageSize, offset: offset))
            let page = try decode(Page.self, answer)
            pages += 1
            if let echoed = page.pagination.offset, echoed != offset {
                throw Self.pagingError(answer, "asked for offset \(offset), got the page at offset \(echoed)")
            }
            if page.items.isEmpty {
                if let total = page.pagination.total, offset < total {
                    throw Self.pagingError(answer, "an empty page at offset \(offset) of \(total)")
                }
                return items
            }
            // Without an echoed offset, a server that ignores it shows itself by sending the same rows again.
            if page.pagination.offset == nil, page.items == previous {
                throw Self.pagingError(answer, "the page at offset \(offset) repeats the one before it")
            }
            previous = page.items
            items += page.items
            offset += page.items.count
            if let total = page.pagination.total {
                if offset >= total { return items }
            } else if page.pagination.next == nil, page.items.count < size {
                return items
            }
            guard pages < Self.settlementsMaxPages else {
                throw Self.pagingError(answer, "no last page after \(pages) pages (\(offset) elements)")
            }
        }
    }

    private static func pagingError(_ answer: Answer, _ detail: String) -> KlarnaAPIError {
        KlarnaAPIError(
            operation: answer.operation, failure: .undecodableResponse(status: answer.http.status, detail: detail),
            requestID: answer.requestID, correlationIDHeader: answer.http.headers["Klarna-Correlation-Id"])
    }

    static func payoutFilters(from: Date?, to: Date?, currency: String?) -> [(String, String)] {
        var filters: [(String, String)] = []
        if let from { filters.append(("start_date", settlementsDate(from))) }
        if let to { filters.append(("end_date", settlementsDate(to))) }
        if let currency { filters.append(("currency_code", currency)) }
        return filters
    }

    static func transactionFilters(paymentReference: String?, orderID: String?) -> [(String, String)] {
        var filters: [(String, String)] = []
        if let paymentReference { filters.append(("payment_reference", paymentReference)) }
        if let orderID { filters.append(("order_id", orderID)) }
        return filters
    }

    static func pageQuery(size: Int, offset: Int) -> [(String, String)] {
        [("size", String(pageSize(size))), ("offset", String(max(offset, 0)))]
    }

    /// `size` as sent: clamped to 1...500.
    static func pageSize(_ size: Int) -> Int { min(max(size, 1), settlementsMaxPageSize) }

    /// `yyyy-MM-dd'T'HH:mm:ss'Z'` in UTC, as Klarna recommends: a date alone means 00:00:00, so an end date of
    /// "2020-01-23" would end the range at that day's first second. Fractions of a second are dropped (toward the
    /// past) rather than rounded, so an end of 23:59:59.999 stays on its day.
    static func settlementsDate(_ date: Date) -> String {
        Date(timeIntervalSince1970: date.timeIntervalSince1970.rounded(.down)).formatted(Date.ISO8601FormatStyle())
    }

    /// The log's `klarna.resource` for a collection call: its filters, or "all".
    private static func resourceLabel(_ filters: [(String, String)]) -> String {
        filters.isEmpty ? "all" : filters.map { "\($0.0)=\($0.1)" }.joined(separator: "&")
    }
}

/// A page of a Settlements collection, for ``KlarnaClient``'s walk through all of them.
protocol SettlementsPage: Decodable {
    associatedtype Item: Equatable
    var items: [Item] { get }
    var pagination: SettlementPagination { get }
}

extension PayoutPage: SettlementsPage {
    var items: [Payout] { payouts }
}

extension TransactionPage: SettlementsPage {
    var items: [SettlementTransaction] { transactions }
}
