"""What the graph and strategy tests share: a question over the Zeta world."""



Q = "Who was the first president of the association which published Journal Zeta?"
