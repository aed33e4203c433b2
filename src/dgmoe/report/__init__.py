"""dgmoe.report"""
